package pgserver

import "context"

// Halt stops the server as an operator's restart does (fast shutdown:
// clients are disconnected, committed transactions are on disk after the
// shutdown checkpoint) and keeps its data; Resume starts it again. Fault
// tests use the pair to restart the database under load.
func (s *Server) Halt() error { return s.pgCtlStop() }

// Resume starts a halted server again on the same port and directory and
// waits until it accepts connections.
func (s *Server) Resume(ctx context.Context) error { return s.start(ctx, s.maxConns) }
