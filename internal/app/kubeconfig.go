package app

import "net"

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
