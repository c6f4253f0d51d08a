package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// Resolver looks up a host's addresses (*net.Resolver does).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// URLPolicy decides which webhook URLs gpuplane may call: https to public
// addresses only, unless the platform allows plain http to some hosts and
// some non-public ranges (dev mode: http to localhost). It is checked when
// a URL is set (every address the host resolves to) and on every
// connection (the address actually dialled), so a name that later
// resolves somewhere else (DNS rebinding) is refused too.
type URLPolicy struct {
	// AllowHTTPHosts may be called over plain http (host names or
	// addresses, exact, case-insensitive).
	AllowHTTPHosts []string
	// AllowPrefixes are non-public ranges that are allowed anyway.
	AllowPrefixes []netip.Prefix
	// Resolver is used when a URL is set (default: net.DefaultResolver).
	Resolver Resolver
}

// NewURLPolicy parses the configuration: comma-separated http hosts and
// CIDR ranges.
func NewURLPolicy(httpHosts, cidrs []string) (*URLPolicy, error) {
	p := &URLPolicy{}
	for _, h := range httpHosts {
		p.AllowHTTPHosts = append(p.AllowHTTPHosts, strings.ToLower(strings.TrimSpace(h)))
	}
	for _, c := range cidrs {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("webhook allowed CIDR %q: %w", c, err)
		}
		p.AllowPrefixes = append(p.AllowPrefixes, pfx.Masked())
	}
	return p, nil
}

// blocked are ranges that are never a webhook receiver on the internet
// (netip's IsPrivate, IsLoopback, ... cover the rest).
var blocked = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (carrier-grade NAT; also cloud metadata such as 100.100.100.200)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// checkAddr says why ip may not be called ("" when it may).
func (p *URLPolicy) checkAddr(ip netip.Addr) string {
	ip = ip.Unmap()
	for _, a := range p.AllowPrefixes {
		if a.Contains(ip) {
			return ""
		}
	}
	switch {
	case !ip.IsValid():
		return "not an address"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.Is4() && ip.As4() == [4]byte{169, 254, 169, 254}, ip == netip.MustParseAddr("fd00:ec2::254"):
		return "cloud metadata"
	case ip.IsLinkLocalUnicast():
		return "link-local (cloud metadata lives here)"
	case ip.IsPrivate():
		return "private"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.Is4() && ip.As4() == [4]byte{255, 255, 255, 255}:
		return "broadcast"
	}
	for _, b := range blocked {
		if b.prefix.Contains(ip) {
			return b.what
		}
	}
	// NAT64 and 6to4 addresses embed an IPv4 address that is what is
	// really reached.
	if v4, ok := embeddedIPv4(ip); ok {
		if why := p.checkAddr(v4); why != "" {
			return why + " (embedded in " + ip.String() + ")"
		}
	}
	return ""
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Site = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	b := ip.As16()
	switch {
	case !ip.Is6():
		return netip.Addr{}, false
	case nat64.Contains(ip), nat64Site.Contains(ip):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

func unsafeURL(field, format string, args ...any) error {
	e := errs.InvalidField(field, format, args...)
	e.Reason = errs.ReasonUnsafeURL
	return e
}

// Check validates a URL as set by a caller (field names it in errors): the
// form, the scheme, and every address its host resolves to now.
func (p *URLPolicy) Check(ctx context.Context, field, raw string) error {
	if err := p.CheckForm(field, raw); err != nil {
		return err
	}
	u, _ := url.Parse(raw)
	host := strings.ToLower(u.Hostname())
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return errs.InvalidField(field, "host %q does not resolve: %v", host, err)
	}
	for _, a := range addrs {
		if why := p.checkAddr(a); why != "" {
			return unsafeURL(field, "host %q resolves to %s, a %s address; webhooks go to public addresses only (a platform admin may allow ranges: --webhook-allowed-cidrs)", host, a, why)
		}
	}
	return nil
}

// CheckForm validates a URL without resolving it: the form and the
// scheme (deliveries check it again, the policy may have changed since).
func (p *URLPolicy) CheckForm(field, raw string) error {
	if len(raw) > 2048 {
		return errs.InvalidField(field, "must be at most 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return errs.InvalidField(field, "must be an absolute URL such as https://hooks.example.com/gpuplane")
	}
	if u.User != nil {
		return unsafeURL(field, "must not carry credentials (user:password@); deliveries are signed instead")
	}
	if u.Fragment != "" {
		return errs.InvalidField(field, "must not have a fragment (#...)")
	}
	host := strings.ToLower(u.Hostname())
	switch u.Scheme {
	case "https":
	case "http":
		if !slices.Contains(p.AllowHTTPHosts, host) {
			return unsafeURL(field, "must use https (plain http only to hosts the platform allows: --webhook-allow-http-hosts)")
		}
	default:
		return unsafeURL(field, "must use https, not %q", u.Scheme)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return errs.InvalidField(field, "port %q is not a port number", port)
		}
	}
	return nil
}

func (p *URLPolicy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{ip}, nil
	}
	r := p.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	return addrs, err
}

// ErrRefused is returned for a connection to an address the policy refuses.
var ErrRefused = errors.New("webhook: address refused")

// Client is the HTTP client deliveries use: no proxy (the address checked
// must be the address reached), no redirects (a 3xx is a failed
// delivery), and every dialled address checked against the policy.
func (p *URLPolicy) Client(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s", ErrRefused, address)
			}
			if why := p.checkAddr(ap.Addr()); why != "" {
				return fmt.Errorf("%w: %s is a %s address", ErrRefused, ap.Addr(), why)
			}
			return nil
		}}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{Transport: transport, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
