package devenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/gpuplane/gpuplane/internal/app"
)

const usage = `usage: gpuplane-dev [flags]          run everything locally on embedded defaults (make run)
       gpuplane-dev token <user>     print a bearer token for a demo user of a running dev server

Demo users: alice bob carol dan erin frank (see README.md).
Run 'gpuplane-dev -h' for the flags; every server flag of 'gpuplane serve' applies.
`

// Main is the gpuplane-dev command line; it returns the exit code
// (0 ok, 1 error, 2 usage).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := app.Defaults()
	cfg.LogFormat = "text"
	fs := flag.NewFlagSet("gpuplane-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	issuerAddr := fs.String("issuer-addr", DefaultIssuerAddr, "dev OIDC issuer listen address")
	second := fs.Bool("second-host-cluster", false, "also start a second local host cluster and register it as host cluster "+SecondHostCluster+
		" (SHARED tier, region=us-east), reached through a kubeconfig Secret")
	fail := func(err error) int {
		if err == nil || errors.Is(err, context.Canceled) {
			return 0
		}
		fmt.Fprintln(stderr, "gpuplane-dev:", err)
		return 1
	}
	if len(args) > 0 && (args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if len(args) > 0 && args[0] == "token" {
		if err := fs.Parse(args[1:]); err != nil {
			return parseFailure(err)
		}
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "usage: gpuplane-dev token <alice|bob|carol|dan|erin|frank>")
			return 2
		}
		tok, err := FetchToken(ctx, *issuerAddr, fs.Arg(0))
		if err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, tok)
		return 0
	}
	if err := cfg.Bind(fs); err != nil {
		fmt.Fprintln(stderr, "gpuplane-dev:", err)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		return parseFailure(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpuplane-dev: unexpected argument %q\n\n%s", fs.Arg(0), usage)
		return 2
	}
	return fail(Run(ctx, Options{Config: cfg, IssuerAddr: *issuerAddr, Out: stdout, ConfigOut: stderr, SecondHostCluster: *second}))
}

// parseFailure is the exit code of a flag parse error: -h/--help printed
// the usage and succeeded, anything else is a usage error.
func parseFailure(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
