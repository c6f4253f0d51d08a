package identity

import (
	"sync"
	"time"
)

// verifiedCache remembers tokens that verified, keyed by their SHA-256, so
// a client reusing its token (every SDK and CLI call does) costs one map
// lookup instead of an RSA verification and JSON parsing. Entries never
// outlive the token's own expiry, and are dropped after cacheTTL at most so
// that a rotated-away signing key stops being honoured soon.
type verifiedCache struct {
	mu      sync.Mutex
	entries map[[32]byte]cachedPrincipal
}

type cachedPrincipal struct {
	p       Principal
	expires time.Time
}

const (
	cacheTTL        = time.Minute
	cacheMaxEntries = 10_000
)

func (c *verifiedCache) get(key [32]byte, now time.Time) (Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return Principal{}, false
	}
	if !now.Before(e.expires) {
		delete(c.entries, key)
		return Principal{}, false
	}
	return e.p, true
}

func (c *verifiedCache) put(key [32]byte, p Principal, tokenExpiry, now time.Time) {
	expires := now.Add(cacheTTL)
	if tokenExpiry.Before(expires) {
		expires = tokenExpiry
	}
	if !now.Before(expires) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[32]byte]cachedPrincipal{}
	}
	if len(c.entries) >= cacheMaxEntries {
		// Drop expired entries; if none are, drop an arbitrary half. Either
		// way the cost is amortised over many puts.
		n := 0
		for k, e := range c.entries {
			if !now.Before(e.expires) || n%2 == 0 {
				delete(c.entries, k)
			}
			n++
		}
	}
	c.entries[key] = cachedPrincipal{p: p, expires: expires}
}
