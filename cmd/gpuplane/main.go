// Command gpuplane runs the gpuplane API server (serve), database
// migrations (migrate) and the local development environment (dev).
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
