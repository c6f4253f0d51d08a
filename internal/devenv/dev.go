package devenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
	"github.com/gpuplane/gpuplane/internal/devenv/pgserver"
	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
	"github.com/gpuplane/gpuplane/internal/store"
)

// DefaultIssuerAddr is where the dev issuer listens, so `gpuplane-dev
// token` finds it without configuration.
const DefaultIssuerAddr = "127.0.0.1:5556"

// DevPortalOrigins are the origins of the Backstage plugin's dev app
// (`npm start` in plugins/gpuplane serves on port 3000); dev mode lets them
// call the REST API unless --cors-allowed-origins says otherwise.
const DevPortalOrigins = "http://localhost:3000,http://127.0.0.1:3000"

// Options configure dev mode.
type Options struct {
	Config     app.Config // server configuration (addresses etc.)
	IssuerAddr string
	Out        io.Writer // where the walkthrough is printed
}

// Run starts everything dev mode needs and serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.IssuerAddr == "" {
		o.IssuerAddr = DefaultIssuerAddr
	}
	cfg := o.Config
	logger := app.NewLogger(cfg)
	say := func(format string, args ...any) { fmt.Fprintf(o.Out, "==> "+format+"\n", args...) }

	if cfg.DatabaseURL == "" {
		say("starting a throwaway PostgreSQL (set DATABASE_URL to use your own)...")
		pg, err := pgserver.Start(ctx, pgserver.Options{Logf: func(f string, a ...any) { logger.Debug(fmt.Sprintf(f, a...)) }})
		if err != nil {
			return fmt.Errorf("PostgreSQL: %w", err)
		}
		defer pg.Stop()
		if err := pg.CreateDatabase(ctx, "gpuplane", ""); err != nil {
			return err
		}
		cfg.DatabaseURL = pg.URL("gpuplane")
		say("PostgreSQL ready at %s", store.RedactDSN(cfg.DatabaseURL))
	}
	say("applying database migrations...")
	if err := store.MigrateUp(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}

	say("starting the development OIDC issuer on %s (dev mode only)...", o.IssuerAddr)
	iss, err := oidcdev.New(ctx, oidcdev.Config{Addr: o.IssuerAddr, Users: DemoUsers, ClientID: cfg.OIDCClientID,
		Logf: func(f string, a ...any) { logger.Debug(fmt.Sprintf(f, a...)) }})
	if err != nil {
		return fmt.Errorf("dev OIDC issuer: %w", err)
	}
	defer iss.Close()
	cfg.OIDCIssuerURL = iss.IssuerURL()
	cfg.OIDCCAFile = ""

	opts := app.Options{Logger: logger, OIDCCACert: iss.CACertPEM()}
	if cfg.Kubeconfig == "" {
		say("starting a local Kubernetes API server as the host cluster (kube-apiserver + etcd, no kubelets)...")
		env, err := envtestenv.Start(ctx, envtestenv.Options{Logf: func(f string, a ...any) { logger.Debug(fmt.Sprintf(f, a...)) }})
		if err != nil {
			return fmt.Errorf("local host cluster: %w (run 'make envtest' first)", err)
		}
		defer env.Stop()
		kube, err := kubernetes.NewForConfig(env.RESTConfig())
		if err != nil {
			return err
		}
		if err := CreateNodes(ctx, kube, DemoNodes); err != nil {
			return err
		}
		kubeconfig := filepath.Join(DevStateDir(), "kubeconfig")
		if err := env.WriteKubeconfig(kubeconfig); err != nil {
			return err
		}
		say("host cluster ready: export KUBECONFIG=%s; kubectl get nodes,queues", kubeconfig)
		opts.HostConfig = env.RESTConfig()
		go SimulateControlPlanes(ctx, env.RESTConfig(), 2*time.Second, func(f string, a ...any) { logger.Warn(fmt.Sprintf(f, a...)) })
	}
	cfg.RunWorker = true
	if cfg.WebhookHTTPHosts == "" && cfg.WebhookAllowedCIDRs == "" {
		// Webhook receivers on this machine (the README walkthrough).
		cfg.WebhookHTTPHosts, cfg.WebhookAllowedCIDRs = "localhost,127.0.0.1,::1", "127.0.0.0/8,::1/128"
		say("webhooks may call http://localhost (dev mode only)")
	}
	if cfg.CORSAllowedOrigins == "" {
		cfg.CORSAllowedOrigins = DevPortalOrigins
	}
	say("browser pages on %s may call the REST API (CORS)", cfg.CORSAllowedOrigins)
	if cfg.VClusterChartDir == "" {
		// Every offered chart version from the Go module cache.
		say("locating the vCluster charts %s in the Go module cache (github.com/loft-sh/vcluster)...", cfg.VClusterChartVersions)
		dirs, err := vclusterchart.Flag(ctx, cfg.VClusterChartVersions)
		if err != nil {
			return fmt.Errorf("vCluster chart: %w", err)
		}
		cfg.VClusterChartDir = dirs
	}
	a, err := app.New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if err := Seed(ctx, a.API); err != nil {
		return fmt.Errorf("seed demo data: %w", err)
	}
	printWalkthrough(o.Out, a.HTTPAddr(), a.GRPCAddr())
	return a.Run(ctx)
}

func printWalkthrough(w io.Writer, httpAddr, grpcAddr string) {
	base := "http://" + strings.Replace(httpAddr, "[::]", "localhost", 1)
	fmt.Fprintf(w, `
gpuplane-dev is running: REST %s, gRPC %s
Demo users: alice (platform admin), bob (owner of team-a), carol (member of team-a),
            dan (owner of team-b), erin (member of team-b), frank (admin of department research)

Try (in another terminal):
  TOKEN=$(go run ./cmd/gpuplane-dev token alice)
  curl -s -H "Authorization: Bearer $TOKEN" %s/v1/teams
  curl -s -H "Authorization: Bearer $(go run ./cmd/gpuplane-dev token erin)" %s/v1/teams/team-a/members   # 404: erin is in team-b
  curl -s -H "Authorization: Bearer $TOKEN" '%s/v1/auditEvents?pageSize=5'
  See README.md for the request -> approve walkthrough. Ctrl-C stops everything.

`, base, grpcAddr, base, base, base)
}

// FetchToken asks a running dev issuer for a demo user's ID token.
func FetchToken(ctx context.Context, issuerAddr, user string) (string, error) {
	if issuerAddr == "" {
		issuerAddr = DefaultIssuerAddr
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	form := url.Values{"username": {user}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+issuerAddr+oidcdev.DevTokenPath, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("is `make run` running? %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("dev issuer: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var out struct {
		IDToken string `json:"id_token"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.IDToken == "" {
		return "", fmt.Errorf("dev issuer: unexpected answer")
	}
	return out.IDToken, nil
}
