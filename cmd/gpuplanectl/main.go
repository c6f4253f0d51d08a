// Command gpuplanectl is the gpuplane command line; see internal/ctl.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuplane/gpuplane/internal/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Run(ctx, os.Args[1:], ctl.Options{})
	stop()
	os.Exit(code)
}
