// Command gpuplane is the production binary: the API server (serve), the
// host-cluster worker (worker) and database migrations (migrate). Dev mode
// is a separate command, cmd/gpuplane-dev, so none of its parts (dev OIDC
// issuer, throwaway PostgreSQL, local API server) is linked here.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuplane/gpuplane/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
