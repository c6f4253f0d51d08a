package app

import "net"

// wireKubeconfig gives GetVirtualClusterKubeconfig its sources: the
// vCluster CA and admin kubeconfig from the host cluster (when there is
// one), and the API address for the credential plugin.
func (a *App) wireKubeconfig() {
	if a.Host != nil {
		a.Approval.CAFetcher = a.Host.VirtualClusterCA
		a.Approval.AdminKubeconfigFetcher = a.Host.AdminKubeconfig
	}
	a.Approval.APIEndpoint = a.cfg.PublicAPIAddress
	if a.Approval.APIEndpoint == "" {
		// Without a configured public address only local clients work.
		a.Approval.APIEndpoint = dialableAddress(a.server.GRPCAddr())
	}
}

// dialableAddress turns a listen address into one a client on this machine
// can dial: an unspecified host (":9090", "0.0.0.0:9090", "[::]:9090")
// becomes localhost.
func dialableAddress(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
