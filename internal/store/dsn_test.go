package store_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/store"
)

// dsnShapes are connection strings in every form PostgreSQL and pgx take,
// each with its secret(s) and text that must survive redaction.
var dsnShapes = []struct {
	name    string
	dsn     string
	secrets []string
	keep    []string
}{
	{"URL", "postgres://app:S3cret-pw@db.internal:5432/gpuplane?sslmode=require",
		[]string{"S3cret-pw"}, []string{"postgres://app:", "@db.internal:5432/gpuplane?sslmode=require"}},
	{"postgresql scheme", "postgresql://app:S3cret-pw@db/gpuplane", []string{"S3cret-pw"}, []string{"@db/gpuplane"}},
	{"pgx5 scheme", "pgx5://app:S3cret-pw@db/gpuplane", []string{"S3cret-pw"}, []string{"pgx5://app:"}},
	{"URL percent-encoded password", "postgres://app:p%40ss%2Fw0rd%3F@db/gpuplane",
		[]string{"p%40ss%2Fw0rd%3F", "p@ss/w0rd?"}, []string{"@db/gpuplane"}},
	{"URL password with raw @ / ? #", "postgres://app:p@ss/w?rd#x@db:5432/gpuplane",
		[]string{"p@ss/w?rd#x", "ss/w?rd"}, []string{"@db:5432/gpuplane"}},
	{"URL multi-host", "postgres://app:S3cret-pw@h1:5432,h2:5433,[::1]:5434/gpuplane?target_session_attrs=read-write",
		[]string{"S3cret-pw"}, []string{"@h1:5432,h2:5433,[::1]:5434/gpuplane"}},
	{"URL password query parameter", "postgres://app@db/gpuplane?sslmode=disable&password=Qu3ry-pw&application_name=x",
		[]string{"Qu3ry-pw"}, []string{"sslmode=disable", "application_name=x"}},
	{"URL PGPASSWORD-like parameter", "postgres://db/gpuplane?PGPASSWORD=Env-like-pw", []string{"Env-like-pw"}, []string{"postgres://db/gpuplane?PGPASSWORD="}},
	{"URL sslpassword and encoded key", "postgres://db/x?sslpassword=Key-pw1&pass%77ord=Key-pw2",
		[]string{"Key-pw1", "Key-pw2"}, []string{"postgres://db/x?"}},
	{"URL user and password both in query", "postgres:///gpuplane?host=/run/pg&user=app&password=Sock3t-pw",
		[]string{"Sock3t-pw"}, []string{"host=/run/pg", "user=app"}},
	{"keyword/value", "host=db.internal port=5432 user=app password=S3cret-pw dbname=gpuplane sslmode=require",
		[]string{"S3cret-pw"}, []string{"host=db.internal", "dbname=gpuplane sslmode=require"}},
	{"keyword/value spaces around =", "host=db password = S3cret-pw dbname=x", []string{"S3cret-pw"}, []string{"host=db", "dbname=x"}},
	{"keyword/value quoted with space", "host=db password='x y secret' dbname=x", []string{"x y secret", "y secret"}, []string{"dbname=x"}},
	{"keyword/value quoted with escapes", `host=db password='it\'s a \\secret' dbname=x`,
		[]string{`it's a \secret`, `s a \\secret`, "a \\secret"}, []string{"dbname=x"}},
	{"keyword/value unquoted escape", `password=back\ slash-pw host=db`, []string{"back slash-pw", `back\ slash-pw`, "slash-pw"}, []string{"host=db"}},
	{"keyword/value password first, tabs", "password=Tab-pw\thost=db", []string{"Tab-pw"}, []string{"host=db"}},
	{"keyword/value sslpassword", "host=db sslpassword=Key-pw3 sslkey=/k", []string{"Key-pw3"}, []string{"sslkey=/k"}},
	{"keyword/value PGPASSWORD-like key", "host=db PGPASSWORD=Env-like-pw", []string{"Env-like-pw"}, []string{"host=db"}},
	{"keyword/value empty quoted password", "host=db password='' dbname=x", nil, []string{"host=db", "dbname=x"}},
	{"unterminated quote", "host=db password='never closed", []string{"never closed"}, nil},
	{"dangling keyword", "host=db password", nil, nil},
}

func TestRedactDSN(t *testing.T) {
	for _, c := range dsnShapes {
		t.Run(c.name, func(t *testing.T) {
			got := store.RedactDSN(c.dsn)
			for _, s := range c.secrets {
				if strings.Contains(got, s) {
					t.Errorf("RedactDSN(%q) = %q still contains %q", c.dsn, got, s)
				}
			}
			if len(c.secrets) > 0 && !strings.Contains(got, store.Redacted) {
				t.Errorf("RedactDSN(%q) = %q does not say what it hid", c.dsn, got)
			}
			for _, k := range c.keep {
				if !strings.Contains(got, k) {
					t.Errorf("RedactDSN(%q) = %q lost %q", c.dsn, got, k)
				}
			}
		})
	}
	if got := store.RedactDSN(""); got != "" {
		t.Errorf("empty DSN redacted to %q", got)
	}
	if got, in := store.RedactDSN("host=db dbname=x"), "host=db dbname=x"; got != in {
		t.Errorf("DSN without a password changed: %q -> %q", in, got)
	}
}

// TestOpenErrorsNeverContainPassword feeds store.Open and store.MigrateUp
// DSNs that fail to parse, each in a way that makes pgx or net/url quote
// the connection string, and DSNs that parse but reach no server; no error
// text may contain the password.
func TestOpenErrorsNeverContainPassword(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().(*net.TCPAddr).AddrPort().Port()
	ln.Close()
	port := func(s string) string { return strings.ReplaceAll(s, "PORT", strconv.Itoa(int(closedPort))) }

	cases := []struct{ dsn, secret string }{
		{"host=db password = Sp4ced-pw port=notaport", "Sp4ced-pw"},
		{`host=db password='it\'s Qu0ted' port=notaport`, "s Qu0ted"},
		{"host=db password='x y secret' sslmode=bogus", "x y secret"},
		{"postgres://app:Url-pw-1@db:notaport/x", "Url-pw-1"},
		{"postgres://app:pa%ZZ-Url-pw-2@db/x", "Url-pw-2"},
		{"postgres://app@db/x?password=Qu3ry-pw&sslmode=bogus", "Qu3ry-pw"},
		{"postgres://app:Url-pw-3@db/x?connect_timeout=soon", "Url-pw-3"},
		{port("host=127.0.0.1 port=PORT user=app password=Unre4chable-pw dbname=x connect_timeout=2"), "Unre4chable-pw"},
		{port("postgres://app:Unre4chable-pw2@127.0.0.1:PORT/x?connect_timeout=2"), "Unre4chable-pw2"},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, openErr := store.Open(ctx, c.dsn, 1)
		migrateErr := store.MigrateUp(ctx, c.dsn)
		cancel()
		for what, err := range map[string]error{"Open": openErr, "MigrateUp": migrateErr} {
			if err == nil {
				t.Errorf("%s(%q) succeeded", what, store.RedactDSN(c.dsn))
				continue
			}
			if strings.Contains(err.Error(), c.secret) {
				t.Errorf("%s error contains the password: %v", what, err)
			}
			t.Logf("%s: %v", what, err)
		}
	}
}
