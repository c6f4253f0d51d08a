package ctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

type kubeconfigFlags struct {
	team       string
	merge      bool
	breakGlass bool
	path       string
	setContext bool
}

func (c *cli) kubeconfigCmd() *cobra.Command {
	var f kubeconfigFlags
	cmd := &cobra.Command{
		Use:   "kubeconfig VCLUSTER",
		Short: "Print a kubeconfig for a virtual cluster, or merge it into yours",
		Long: `Get a kubeconfig for a virtual cluster of your team. Its user is the
'gpuplanectl credential' plugin: kubectl gets your own OIDC token from the
login cache, so the virtual cluster sees you, not a shared admin.

--merge adds the cluster, user and context to --kubeconfig, else the first
file of $KUBECONFIG, else ~/.kube/config, and switches to the context.

--break-glass (platform admins) returns the vCluster's admin credential
instead. Every use is recorded in the audit log.`,
		Example: `  gpuplanectl kubeconfig ml-dev --merge && kubectl get ns
  gpuplanectl kubeconfig ml-dev > ml-dev.kubeconfig
  gpuplanectl kubeconfig ml-dev --break-glass --kubeconfig /tmp/admin.kubeconfig --merge`,
		Args: exactArgs(1, "the virtual cluster"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			api, err := c.api(ctx)
			if err != nil {
				return err
			}
			cctx, cancel := c.call(ctx)
			defer cancel()
			name, err := c.resolveVC(cctx, api, args[0], f.team)
			if err != nil {
				return err
			}
			kc, err := api.VirtualClusters.GetVirtualClusterKubeconfig(cctx, &pb.GetVirtualClusterKubeconfigRequest{
				Name: name, BreakGlass: f.breakGlass, ApiEndpoint: c.server})
			if err != nil {
				return err
			}
			if kc.GetBreakGlass() {
				fmt.Fprintln(c.stderr(), "WARNING: this is the virtual cluster's admin credential (break glass). This use is recorded in the audit log.")
			}
			cfg, err := clientcmd.Load([]byte(kc.GetKubeconfig()))
			if err != nil {
				return fmt.Errorf("the server's kubeconfig does not parse: %w", err)
			}
			c.pinPluginConfig(cfg)
			if !f.merge {
				if c.output == "json" || c.output == "yaml" {
					return c.printObject(kc)
				}
				out, err := clientcmd.Write(*cfg)
				if err != nil {
					return err
				}
				_, err = c.stdout().Write(out)
				return err
			}
			path := f.path
			if path == "" {
				if list := filepath.SplitList(c.opts.Getenv("KUBECONFIG")); len(list) > 0 && list[0] != "" {
					path = list[0]
				} else {
					path = clientcmd.RecommendedHomeFile
				}
			}
			if err := mergeKubeconfig(path, cfg, f.setContext); err != nil {
				return err
			}
			verb := "is available"
			if f.setContext {
				verb = "is now the current context"
			}
			fmt.Fprintf(c.stdout(), "Context %q %s in %s.\n", kc.GetContext(), verb, path)
			return nil
		},
	}
	cmd.Flags().StringVar(&f.team, "team", "", "team of the virtual cluster (default: looked up)")
	cmd.Flags().BoolVar(&f.merge, "merge", false, "merge into a kubeconfig file instead of printing")
	cmd.Flags().BoolVar(&f.breakGlass, "break-glass", false, "platform admins: the vCluster admin credential (audited)")
	cmd.Flags().StringVar(&f.path, "kubeconfig", "", "with --merge: the file to merge into")
	cmd.Flags().BoolVar(&f.setContext, "set-context", true, "with --merge: switch the current context to the virtual cluster")
	return cmd
}

// pinPluginConfig makes the credential plugin use this CLI's configuration
// file when it is not the default one, so kubectl finds the same login.
func (c *cli) pinPluginConfig(cfg *clientcmdapi.Config) {
	def, err := defaultConfigPath()
	if err == nil && def == c.configPath {
		return
	}
	abs, err := filepath.Abs(c.configPath)
	if err != nil {
		abs = c.configPath
	}
	for _, u := range cfg.AuthInfos {
		if u.Exec != nil && u.Exec.Command == "gpuplanectl" {
			u.Exec.Env = append(u.Exec.Env, clientcmdapi.ExecEnvVar{Name: ConfigEnv, Value: abs})
		}
	}
}

// mergeKubeconfig adds (replacing same-named) clusters, users and contexts
// of add to the file at path, which may not exist yet.
func mergeKubeconfig(path string, add *clientcmdapi.Config, setContext bool) error {
	base, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		base, err = clientcmdapi.NewConfig(), nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for k, v := range add.Clusters {
		base.Clusters[k] = v
	}
	for k, v := range add.AuthInfos {
		base.AuthInfos[k] = v
	}
	for k, v := range add.Contexts {
		base.Contexts[k] = v
	}
	if setContext || base.CurrentContext == "" {
		base.CurrentContext = add.CurrentContext
	}
	if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return err
	}
	// WriteToFile writes 0600.
	return clientcmd.WriteToFile(*base, path)
}
