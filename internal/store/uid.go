package store

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewUID is a random (version 4) UUID for a new row's uid: drawn here
// rather than by the database's default, a repository knows the row it
// inserts without reading it back, so the insert can be deferred
// (Tx.ExecDeferred) into the transaction's next round trip.
func NewUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// Now is a timestamp as the database stores it (UTC, microseconds), for
// rows whose times a repository sets itself (see NewUID).
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
