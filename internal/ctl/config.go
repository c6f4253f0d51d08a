package ctl

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	// ConfigEnv names the configuration file when --config is not given.
	ConfigEnv = "GPUPLANE_CONFIG"
	// ServerEnv stands in for --server.
	ServerEnv = "GPUPLANE_SERVER"
	// TokenEnv stands in for --token.
	TokenEnv = "GPUPLANE_TOKEN"

	defaultServer    = "localhost:9090"
	defaultDevIssuer = "http://127.0.0.1:5556"
	defaultClientID  = "gpuplanectl"
	configFileName   = "config.yaml"
	dirMode          = 0o700
	fileMode         = 0o600
)

// fileConfig is the CLI's configuration file: the server in use and, per
// server, how to log in to it. No secrets live here; tokens are cached in
// separate files next to it.
type fileConfig struct {
	CurrentServer string                  `json:"currentServer,omitempty"`
	Servers       map[string]serverConfig `json:"servers,omitempty"`
}

type serverConfig struct {
	Issuer   string `json:"issuer,omitempty"`
	ClientID string `json:"clientID,omitempty"`
	Insecure *bool  `json:"insecure,omitempty"`
}

// defaultConfigPath is os.UserConfigDir()/gpuplane/config.yaml.
func defaultConfigPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no configuration directory (set --config or %s): %w", ConfigEnv, err)
	}
	return filepath.Join(dir, "gpuplane", configFileName), nil
}

func loadConfig(path string) (fileConfig, error) {
	var c fileConfig
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func saveConfig(path string, c fileConfig) error {
	raw, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	return writePrivate(path, raw)
}

// writePrivate writes a file only the user can read, in a directory only
// the user can enter, atomically (temp file + rename).
func writePrivate(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	// MkdirAll keeps an existing directory's mode; tighten ours.
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 && filepath.Base(dir) == "gpuplane" {
		if err := os.Chmod(dir, dirMode); err != nil {
			return err
		}
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(fileMode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// cachedToken is what login stores for one server.
type cachedToken struct {
	Server        string    `json:"server"`
	Issuer        string    `json:"issuer"`
	ClientID      string    `json:"clientID"`
	TokenEndpoint string    `json:"tokenEndpoint"`
	IDToken       string    `json:"idToken"`
	RefreshToken  string    `json:"refreshToken,omitempty"`
	Expiry        time.Time `json:"expiry"` // of the ID token
}

// tokenPath is the cache file of server, next to the configuration file.
func tokenPath(configPath, server string) string {
	var b strings.Builder
	for _, r := range server {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return filepath.Join(filepath.Dir(configPath), "token-"+b.String()+".json")
}

func loadToken(path string) (*cachedToken, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var t cachedToken
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("token cache %s is corrupt (run 'gpuplanectl login'): %w", path, err)
	}
	return &t, nil
}

func saveToken(path string, t *cachedToken) error {
	raw, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return writePrivate(path, append(raw, '\n'))
}

// lockFile serialises refreshes of one cache file across processes (kubectl
// may run several credential plugins at once, and refresh tokens rotate: the
// loser of a race would be left with a dead one). A lock older than
// staleLock is taken over.
func lockFile(path string, timeout time.Duration) (unlock func(), err error) {
	const staleLock = 30 * time.Second
	lock := path + ".lock"
	if err := os.MkdirAll(filepath.Dir(lock), dirMode); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fileMode)
		if err == nil {
			f.Close()
			return func() { os.Remove(lock) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if fi, serr := os.Stat(lock); serr == nil && time.Since(fi.ModTime()) > staleLock {
			os.Remove(lock)
			continue
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("token cache is locked by another gpuplanectl (remove %s if none runs)", lock)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jwtExpiry reads the exp claim of a JWT without verifying it (the server
// verifies; the CLI only needs to know when to refresh).
func jwtExpiry(raw string) (time.Time, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, fmt.Errorf("JWT payload: %w", err)
	}
	var c struct {
		Exp json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return time.Time{}, fmt.Errorf("JWT payload: %w", err)
	}
	exp, err := c.Exp.Float64()
	if err != nil || exp <= 0 {
		return time.Time{}, errors.New("JWT has no exp claim")
	}
	return time.Unix(int64(exp), 0), nil
}

// isLoopback: localhost and loopback IPs, where plaintext is the default.
func isLoopback(server string) bool {
	host := server
	if h, _, err := net.SplitHostPort(server); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
