package identity

import (
	"testing"
	"time"
)

func TestVerifiedCacheNeverOutlivesTheToken(t *testing.T) {
	var c verifiedCache
	now := time.Unix(1_000_000, 0)
	key := [32]byte{1}
	p := Principal{Subject: "user-bob"}

	c.put(key, p, now.Add(10*time.Second), now)
	if got, ok := c.get(key, now.Add(9*time.Second)); !ok || got.Subject != "user-bob" {
		t.Fatalf("fresh entry not served: %v %v", got, ok)
	}
	if _, ok := c.get(key, now.Add(10*time.Second)); ok {
		t.Fatal("entry served at the token's expiry")
	}

	c.put(key, p, now.Add(time.Hour), now)
	if _, ok := c.get(key, now.Add(cacheTTL)); ok {
		t.Fatal("entry served after the cache TTL")
	}

	c.put(key, p, now.Add(-time.Second), now)
	if _, ok := c.get(key, now); ok {
		t.Fatal("an already expired token was cached")
	}
}

func TestVerifiedCacheIsBounded(t *testing.T) {
	var c verifiedCache
	now := time.Unix(1_000_000, 0)
	for i := 0; i < cacheMaxEntries*3; i++ {
		var k [32]byte
		k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
		c.put(k, Principal{}, now.Add(time.Hour), now)
	}
	if n := len(c.entries); n > cacheMaxEntries {
		t.Fatalf("cache holds %d entries, bound is %d", n, cacheMaxEntries)
	}
}
