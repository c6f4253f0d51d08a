package server

import (
	"net"
	"sync"
	"sync/atomic"
)

// drainListener lets Shutdown refuse new gRPC connections at once while
// the HTTP listener drains (REST calls in flight still need the gRPC
// server), before GracefulStop runs. drain closes the socket; Accept then
// blocks, so grpc.Server.Serve does not fail, until the server closes the
// listener itself in GracefulStop or Stop.
type drainListener struct {
	net.Listener
	draining  atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
}

func newDrainListener(l net.Listener) *drainListener {
	return &drainListener{Listener: l, closed: make(chan struct{})}
}

func (l *drainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && l.draining.Load() {
		<-l.closed
		return nil, net.ErrClosed
	}
	return c, err
}

func (l *drainListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	if l.draining.Load() {
		return nil // the socket is closed already
	}
	return l.Listener.Close()
}

// drain stops accepting: new connections are refused from now on.
func (l *drainListener) drain() {
	if !l.draining.Swap(true) {
		_ = l.Listener.Close()
	}
}
