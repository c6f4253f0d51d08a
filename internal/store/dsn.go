package store

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Redacted replaces every secret RedactDSN hides.
const Redacted = "REDACTED"

// minScrubLength: secrets shorter than this are not searched for in error
// texts, where replacing every occurrence of one or two characters would
// garble the message; RedactDSN masks them regardless.
const minScrubLength = 4

var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// secretSpan is the position of a secret value in a DSN, and the value as
// the driver would read it (unquoted, unescaped or percent-decoded).
type secretSpan struct {
	start, end int
	value      string
}

// RedactDSN returns dsn with every password masked, in each form a
// PostgreSQL connection string can take:
//
//   - URLs (postgres://, postgresql://, pgx5://, any scheme): the password
//     of the user info, also when it holds characters that should have been
//     percent-encoded, and query parameters whose name mentions a password
//     (password, sslpassword, PGPASSWORD=..., percent-encoded names too);
//   - keyword/value strings: host=db password=s3cret, password = s3cret,
//     password='x y', password='it\'s', sslpassword=...
//
// Everything else is kept, so the output still tells which server and
// database are meant. A string that cannot be tokenised as either form is
// masked whole: where its values end cannot be known.
func RedactDSN(dsn string) string {
	spans, ok := scanDSN(dsn)
	if !ok {
		return Redacted
	}
	var b strings.Builder
	last := 0
	for _, s := range spans {
		b.WriteString(dsn[last:s.start])
		b.WriteString(Redacted)
		last = s.end
	}
	b.WriteString(dsn[last:])
	return b.String()
}

// dsnSecrets lists the secret values in dsn as written and as decoded, for
// scrubbing texts (driver errors) that may quote them.
func dsnSecrets(dsn string) []string {
	spans, _ := scanDSN(dsn)
	var out []string
	for _, s := range spans {
		for _, v := range []string{dsn[s.start:s.end], s.value} {
			if len(v) >= minScrubLength {
				out = append(out, v)
			}
		}
	}
	return out
}

// scrub returns msg with every secret of dsn masked.
func scrub(dsn, msg string) string {
	for _, s := range dsnSecrets(dsn) {
		msg = strings.ReplaceAll(msg, s, Redacted)
	}
	return msg
}

// dsnError keeps the cause for errors.Is/As while its text is scrubbed.
type dsnError struct {
	msg   string
	cause error
}

func (e *dsnError) Error() string { return e.msg }
func (e *dsnError) Unwrap() error { return e.cause }

// scrubbedError wraps err as "prefix: err" with dsn's secrets removed from
// the text.
func scrubbedError(dsn, prefix string, err error) error {
	return &dsnError{msg: scrub(dsn, prefix+": "+err.Error()), cause: err}
}

// parseDSNError explains why pgx rejected dsn without quoting a password.
// pgx masks passwords in its parse errors only on a best-effort basis (it
// misses "password = x" and quoted values with escapes), and net/url's
// parse errors quote the whole URL; so the text is rebuilt around our
// redaction and scrubbed, and the cause is deliberately not kept.
func parseDSNError(dsn string, err error) error {
	reason := err.Error()
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		var ue *url.Error
		if errors.As(pce, &ue) {
			reason = fmt.Sprintf("cannot parse `%s`: failed to parse as URL (%v)", RedactDSN(dsn), ue.Err)
		} else {
			safe := *pce
			safe.ConnString = RedactDSN(pce.ConnString)
			reason = safe.Error()
		}
	}
	return fmt.Errorf("store: invalid database DSN: %s", scrub(dsn, reason))
}

// scanDSN finds the secret values of dsn. ok is false when dsn is neither
// a URL nor a well-formed keyword/value string.
func scanDSN(dsn string) ([]secretSpan, bool) {
	if dsn == "" {
		return nil, true
	}
	if m := urlScheme.FindString(dsn); m != "" {
		return scanURL(dsn, len(m)), true
	}
	return scanKeywords(dsn)
}

func secretKey(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	key = strings.ToLower(key)
	return strings.Contains(key, "password") || strings.Contains(key, "passwd")
}

// scanURL finds the user info password and secret query values of a URL
// whose authority starts at offset start. The user info ends at the last
// '@' that is followed by a host list (names, addresses, ports, commas)
// and then the end, '/', '?' or '#': a password with unencoded '@', '/',
// '?' or '#' is still masked whole, where net/url would cut it short. An
// '@' at the very end of the query can make more than the password masked,
// never less.
func scanURL(dsn string, start int) []secretSpan {
	var spans []secretSpan
	hostStart := start
	for i := len(dsn) - 1; i >= start; i-- {
		if dsn[i] != '@' {
			continue
		}
		j := i + 1
		for j < len(dsn) && isHostChar(dsn[j]) {
			j++
		}
		if j < len(dsn) && dsn[j] != '/' && dsn[j] != '?' && dsn[j] != '#' {
			continue
		}
		if colon := strings.IndexByte(dsn[start:i], ':'); colon >= 0 {
			spans = append(spans, urlSpan(dsn, start+colon+1, i, url.PathUnescape))
		}
		hostStart = i + 1
		break
	}
	q := strings.IndexByte(dsn[hostStart:], '?')
	if q < 0 {
		return spans
	}
	pos := hostStart + q + 1
	end := len(dsn)
	if h := strings.IndexByte(dsn[pos:], '#'); h >= 0 {
		end = pos + h
	}
	for pos < end {
		amp := strings.IndexByte(dsn[pos:end], '&')
		paramEnd := end
		if amp >= 0 {
			paramEnd = pos + amp
		}
		if eq := strings.IndexByte(dsn[pos:paramEnd], '='); eq >= 0 && secretKey(dsn[pos:pos+eq]) {
			spans = append(spans, urlSpan(dsn, pos+eq+1, paramEnd, url.QueryUnescape))
		}
		pos = paramEnd + 1
	}
	return spans
}

// urlSpan is the secret dsn[start:end], decoded with unescape when it is
// validly escaped, else taken as written.
func urlSpan(dsn string, start, end int, unescape func(string) (string, error)) secretSpan {
	raw := dsn[start:end]
	dec, err := unescape(raw)
	if err != nil {
		dec = raw
	}
	return secretSpan{start: start, end: end, value: dec}
}

func isHostChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte(".-_:,[]%", c) >= 0
}

// scanKeywords tokenises a keyword/value string as libpq does: key, '='
// (optionally surrounded by spaces), then a value that is either
// single-quoted (backslash escapes ' and \) or runs to the next space
// (backslash escapes any character).
func scanKeywords(dsn string) ([]secretSpan, bool) {
	var spans []secretSpan
	i := 0
	skipSpace := func() {
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
	}
	for {
		skipSpace()
		if i == len(dsn) {
			return spans, true
		}
		keyStart := i
		for i < len(dsn) && dsn[i] != '=' && !isSpace(dsn[i]) {
			i++
		}
		key := dsn[keyStart:i]
		skipSpace()
		if i == len(dsn) || dsn[i] != '=' || key == "" {
			return spans, false
		}
		i++
		skipSpace()
		valStart := i
		var val strings.Builder
		if i < len(dsn) && dsn[i] == '\'' {
			i++
			closed := false
			for i < len(dsn) {
				c := dsn[i]
				if c == '\\' && i+1 < len(dsn) {
					val.WriteByte(dsn[i+1])
					i += 2
					continue
				}
				i++
				if c == '\'' {
					closed = true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return spans, false
			}
		} else {
			for i < len(dsn) && !isSpace(dsn[i]) {
				if dsn[i] == '\\' && i+1 < len(dsn) {
					i++
				}
				val.WriteByte(dsn[i])
				i++
			}
		}
		if secretKey(key) {
			spans = append(spans, secretSpan{start: valStart, end: i, value: val.String()})
		}
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
