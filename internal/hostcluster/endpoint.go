package hostcluster

// Endpoint is the virtual cluster's API server address as written into its
// exported kubeconfig (Settings.KubeconfigServer with {name}/{namespace}).
func (c *Client) Endpoint(vcName string) string { return c.settings.kubeconfigServer(vcName) }
