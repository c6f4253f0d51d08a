// Package ctl is gpuplanectl, the gpuplane command line: login with OIDC,
// kubectl-like reads and writes of the API, self-service requests with
// live progress, kubeconfigs and the kubectl credential plugin.
//
// cmd/gpuplanectl is a one-line main around Run; tests run the same command
// tree in-process.
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/gpuplane/gpuplane/pkg/client"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Options are the process' surroundings; zero values mean the real ones.
type Options struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv defaults to os.Getenv.
	Getenv func(string) string
	// OpenBrowser opens a URL for the interactive login; default: the
	// platform's opener (xdg-open, open, rundll32). Its failure is not an
	// error: the URL is printed too.
	OpenBrowser func(url string) error
	// OnDeviceCode is told the verification URL (with the code) and the
	// user code of a device login, after they were printed.
	OnDeviceCode func(verificationURIComplete, userCode string)
	// HTTPClient talks to the OIDC issuer; default: 30s timeout.
	HTTPClient *http.Client
	// Now is the clock (token expiry, progress times).
	Now func() time.Time
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// cli holds the global flags and what commands share during one Run.
type cli struct {
	opts Options

	server     string
	insecure   bool
	token      string
	configPath string
	output     string
	timeout    time.Duration

	root       *cobra.Command
	clientOnce sync.Once
	client     *client.Client
	clientErr  error
	tokens     *tokenSource
}

// Run executes gpuplanectl with args (without the program name) and returns
// the exit code.
func Run(ctx context.Context, args []string, opts Options) int {
	if opts.Stdin == nil {
		opts.Stdin = os.Stdin
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.OpenBrowser == nil {
		opts.OpenBrowser = openBrowser
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &cli{opts: opts}
	root := c.newRoot()
	root.SetArgs(args)
	root.SetIn(opts.Stdin)
	root.SetOut(opts.Stdout)
	root.SetErr(opts.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if c.client != nil {
		c.client.Close()
	}
	if err == nil {
		return ExitOK
	}
	if isUsage(err) {
		fmt.Fprintf(opts.Stderr, "Error: %v\n", err)
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(opts.Stderr, "See '%s --help'.\n", cmd.CommandPath())
		return ExitUsage
	}
	fmt.Fprintln(opts.Stderr, c.describe(err))
	return ExitError
}

// isUsage recognises our usage errors and cobra's own (unknown commands,
// flags, arguments).
func isUsage(err error) bool {
	var u usageError
	if errors.As(err, &u) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag",
		"flag needs an argument", "invalid argument", "accepts ", "requires at least", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// describe renders an error for people: the server's message and the
// ErrorInfo reason, plus what to do for the common cases.
func (c *cli) describe(err error) string {
	if errors.Is(err, context.Canceled) {
		return "Error: interrupted"
	}
	e, ok := client.AsError(err)
	if !ok {
		return "Error: " + err.Error()
	}
	var b strings.Builder
	switch e.Code {
	case codes.Unavailable:
		fmt.Fprintf(&b, "Error: cannot reach the gpuplane API at %s: %s", c.server, e.Message)
		if !c.insecure && isLoopback(c.server) {
			b.WriteString(" (a local server usually speaks plaintext: --insecure)")
		}
		return b.String()
	case codes.DeadlineExceeded:
		return fmt.Sprintf("Error: the gpuplane API at %s did not answer within %s", c.server, c.timeout)
	}
	// The server appends the field violations to the message; show them
	// on lines of their own instead.
	msg := e.Message
	if len(e.Violations) > 0 {
		parts := make([]string, len(e.Violations))
		for i, v := range e.Violations {
			parts[i] = v.Field + ": " + v.Description
		}
		joined := strings.Join(parts, "; ")
		if m, ok := strings.CutSuffix(msg, ": "+joined); ok {
			msg = m
		} else if msg == joined {
			msg = "invalid request"
		}
	}
	b.WriteString("Error: " + msg)
	if e.Reason != "" {
		fmt.Fprintf(&b, " [%s]", e.Reason)
	}
	for _, v := range e.Violations {
		fmt.Fprintf(&b, "\n  %s: %s", v.Field, v.Description)
	}
	if e.Code == codes.Unauthenticated {
		fmt.Fprintf(&b, "\nLog in again: gpuplanectl login --server %s", c.server)
	}
	return b.String()
}

func (c *cli) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "gpuplanectl",
		Short: "Self-service GPU tenancy: teams, virtual clusters and quota requests on gpuplane",
		Long: `gpuplanectl talks to a gpuplane API server.

  gpuplanectl login                                  # OIDC login (browser; --device without one)
  gpuplanectl get teams                              # what you can see
  gpuplanectl request vcluster ml-dev --gpu 1 --wait # ask for a virtual cluster, watch it come up
  gpuplanectl kubeconfig ml-dev --merge              # use it with kubectl`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q", args[0])
			}
			return nil
		},
		PersistentPreRunE: c.resolveGlobals,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	c.root = root
	f := root.PersistentFlags()
	f.StringVar(&c.server, "server", "", "gpuplane gRPC address host:port (env "+ServerEnv+"; default: the server of the last login, else "+defaultServer+")")
	f.BoolVar(&c.insecure, "insecure", false, "plaintext gRPC without TLS (default: true for localhost, else as at login)")
	f.StringVar(&c.token, "token", "", "bearer token to use instead of the login cache (env "+TokenEnv+")")
	f.StringVar(&c.configPath, "config", "", "configuration file (env "+ConfigEnv+"; default <user config dir>/gpuplane/"+configFileName+")")
	f.StringVarP(&c.output, "output", "o", "table", "output format: table, json, yaml or name")
	f.DurationVar(&c.timeout, "request-timeout", 30*time.Second, "deadline of each API call")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json", "yaml", "name"}, cobra.ShellCompDirectiveNoFileComp
	})

	root.AddGroup(&cobra.Group{ID: "auth", Title: "Login:"}, &cobra.Group{ID: "read", Title: "Reading:"},
		&cobra.Group{ID: "write", Title: "Changing:"}, &cobra.Group{ID: "kube", Title: "Using virtual clusters:"})
	add := func(group string, cmds ...*cobra.Command) {
		for _, cmd := range cmds {
			cmd.GroupID = group
			root.AddCommand(cmd)
		}
	}
	add("auth", c.loginCmd(), c.logoutCmd(), c.whoamiCmd())
	add("read", c.getCmd())
	add("write", c.createCmd(), c.requestCmd(), c.decideCmd("approve"), c.decideCmd("reject"), c.cancelCmd(), c.checkFitCmd())
	add("kube", c.kubeconfigCmd(), c.credentialCmd())
	root.AddCommand(c.versionCmd())
	root.SetHelpCommandGroupID("")
	root.SetCompletionCommandGroupID("")
	return root
}

// resolveGlobals fills in --server, --insecure, --token and --config from
// the environment and the configuration file.
func (c *cli) resolveGlobals(cmd *cobra.Command, _ []string) error {
	switch c.output {
	case "table", "json", "yaml", "name":
	default:
		return usagef("--output %q: must be table, json, yaml or name", c.output)
	}
	if c.configPath == "" {
		c.configPath = c.opts.Getenv(ConfigEnv)
	}
	if c.configPath == "" {
		p, err := defaultConfigPath()
		if err != nil {
			return err
		}
		c.configPath = p
	}
	if c.token == "" {
		c.token = c.opts.Getenv(TokenEnv)
	}
	fc, err := loadConfig(c.configPath)
	if err != nil {
		return err
	}
	if !cmd.Flags().Changed("server") {
		switch {
		case c.opts.Getenv(ServerEnv) != "":
			c.server = c.opts.Getenv(ServerEnv)
		case fc.CurrentServer != "":
			c.server = fc.CurrentServer
		default:
			c.server = defaultServer
		}
	}
	if !cmd.Flags().Changed("insecure") {
		if sc, ok := fc.Servers[c.server]; ok && sc.Insecure != nil {
			c.insecure = *sc.Insecure
		} else {
			c.insecure = isLoopback(c.server)
		}
	}
	return nil
}

// api returns the client for the resolved server, creating it once.
func (c *cli) api(ctx context.Context) (*client.Client, error) {
	c.clientOnce.Do(func() {
		var tok func(context.Context) (string, error)
		if c.token != "" {
			tok = client.StaticToken(c.token)
		} else {
			ts, err := c.tokenSource()
			if err != nil {
				c.clientErr = err
				return
			}
			if err := ts.check(); err != nil {
				c.clientErr = err
				return
			}
			tok = ts.Token
		}
		c.client, c.clientErr = client.New(ctx, client.Config{
			Address: c.server, Insecure: c.insecure, TokenFunc: tok, UserAgent: "gpuplanectl/" + version(),
		})
	})
	return c.client, c.clientErr
}

// call bounds one API call by --request-timeout.
func (c *cli) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

func (c *cli) stdout() io.Writer { return c.opts.Stdout }
func (c *cli) stderr() io.Writer { return c.opts.Stderr }

func (c *cli) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the gpuplanectl version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(c.stdout(), "gpuplanectl %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// Argument validators that report usage errors (exit code 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s needs %s", cmd.CommandPath(), what)
		}
		return nil
	}
}

func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("%s takes at most %s, got %q", cmd.CommandPath(), what, args)
		}
		return nil
	}
}

func openBrowser(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait() //nolint:errcheck // the browser outlives us or fails visibly
	return nil
}
