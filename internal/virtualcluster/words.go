package virtualcluster

import "strings"

// camelWord turns "PENDING_APPROVAL" into "PendingApproval".
func camelWord(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(strings.ToLower(s), "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}
