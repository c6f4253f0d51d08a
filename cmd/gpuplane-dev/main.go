// Command gpuplane-dev runs the whole of gpuplane locally on embedded
// defaults (make run): a throwaway PostgreSQL, the dev OIDC issuer, a local
// host cluster and demo data. `gpuplane-dev token <user>` prints a demo
// user's bearer token. None of this is linked into the production gpuplane
// binary.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuplane/gpuplane/internal/devenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := devenv.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
