// Package cli is the gpuplane command line (cmd/gpuplane stays tiny).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/store"
)

const usage = `usage: gpuplane <command> [flags]

commands:
  serve                 run the API server (gRPC + REST); --run-worker also runs the worker
  worker                run the host-cluster worker (turns approved requests into host objects)
  migrate up|down [N]|version|force V
                        manage the database schema

Run 'gpuplane <command> -h' for the flags; every flag is also an environment variable.
`

// Main is the gpuplane command line; it returns the exit code
// (0 ok, 1 error, 2 usage).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cfg := app.Defaults()
	fs := flag.NewFlagSet("gpuplane "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := cfg.Bind(fs); err != nil {
		fmt.Fprintln(stderr, "gpuplane:", err)
		return 2
	}
	fs.Usage = func() {
		synopsis := map[string]string{
			"migrate": "migrate [flags] up|down [N]|version|force V",
		}[args[0]]
		if synopsis == "" {
			synopsis = args[0] + " [flags]"
		}
		fmt.Fprintf(fs.Output(), "usage: gpuplane %s\n\nflags (each also an environment variable):\n", synopsis)
		fs.PrintDefaults()
	}
	// parse reports whether to go on; if not, the exit code: 0 for -h and
	// --help (the usage was printed), 2 for a bad flag.
	parse := func(args []string) (int, bool) {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0, false
			}
			return 2, false
		}
		return 0, true
	}
	fail := func(err error) int {
		if err == nil || errors.Is(err, context.Canceled) {
			return 0
		}
		fmt.Fprintln(stderr, "gpuplane:", err)
		return 1
	}
	switch args[0] {
	case "serve":
		if code, ok := parse(args[1:]); !ok {
			return code
		}
		cfg.Print(stderr)
		return fail(app.Run(ctx, cfg, app.Options{}))
	case "worker":
		if code, ok := parse(args[1:]); !ok {
			return code
		}
		cfg.Print(stderr)
		return fail(app.RunWorker(ctx, cfg, nil))
	case "migrate":
		if code, ok := parse(args[1:]); !ok {
			return code
		}
		return migrate(ctx, cfg, fs.Args(), stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "gpuplane: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func migrate(ctx context.Context, cfg app.Config, args []string, stdout, stderr io.Writer) int {
	if cfg.DatabaseURL == "" {
		fmt.Fprintln(stderr, "gpuplane migrate: set --database-url or DATABASE_URL")
		return 2
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: gpuplane migrate up|down [N]|version|force V")
		return 2
	}
	var err error
	switch args[0] {
	case "up":
		err = store.MigrateUp(ctx, cfg.DatabaseURL)
	case "down":
		steps := 1
		if len(args) > 1 {
			if steps, err = strconv.Atoi(args[1]); err != nil || steps < 1 {
				fmt.Fprintln(stderr, "gpuplane migrate down: N must be a positive number")
				return 2
			}
		}
		err = store.MigrateDown(ctx, cfg.DatabaseURL, steps)
	case "force":
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: gpuplane migrate force V")
			return 2
		}
		v, perr := strconv.Atoi(args[1])
		if perr != nil {
			fmt.Fprintln(stderr, "gpuplane migrate force: V must be a number")
			return 2
		}
		err = store.ForceVersion(ctx, cfg.DatabaseURL, v)
	case "version":
	default:
		fmt.Fprintf(stderr, "gpuplane migrate: unknown action %q\n", args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpuplane migrate:", err)
		return 1
	}
	v, dirty, err := store.SchemaVersion(ctx, cfg.DatabaseURL)
	if err != nil {
		fmt.Fprintln(stderr, "gpuplane migrate:", err)
		return 1
	}
	latest, _ := store.LatestSchemaVersion()
	fmt.Fprintf(stdout, "schema version %d (latest %d, dirty %v)\n", v, latest, dirty)
	return 0
}
