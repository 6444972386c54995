package main

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// loadBalancer stands where a customer runs a Kubernetes Service or a TCP load balancer in front
// of the orchestrator's replicas: it spreads connections over the backends round-robin, and a
// backend that refuses the connection (its process is gone) is passed over for the next one.
// Connections to a backend that dies are cut, as they are when a pod goes away; their clients
// reconnect and land on a live replica.
type loadBalancer struct {
	addr     string
	ln       net.Listener
	backends []string

	mu   sync.Mutex
	next int
	// open counts the connections open to each backend; refused the dials it refused.
	open, refused []int
	conns         map[net.Conn]bool
}

func newLoadBalancer(t testing.TB, backends ...string) *loadBalancer {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &loadBalancer{addr: ln.Addr().String(), ln: ln, backends: backends,
		open: make([]int, len(backends)), refused: make([]int, len(backends)), conns: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go lb.serve(c)
		}
	}()
	t.Cleanup(lb.close)
	return lb
}

func (lb *loadBalancer) url() string { return "http://" + lb.addr }

// dial connects to the next backend that accepts, trying each at most once.
func (lb *loadBalancer) dial() (net.Conn, int) {
	lb.mu.Lock()
	first := lb.next
	lb.next = (lb.next + 1) % len(lb.backends)
	lb.mu.Unlock()
	for i := range lb.backends {
		b := (first + i) % len(lb.backends)
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.DialContext(context.Background(), "tcp", lb.backends[b])
		if err == nil {
			return c, b
		}
		lb.mu.Lock()
		lb.refused[b]++
		lb.mu.Unlock()
	}
	return nil, -1
}

func (lb *loadBalancer) serve(in net.Conn) {
	out, b := lb.dial()
	if out == nil {
		in.Close()
		return
	}
	lb.mu.Lock()
	lb.open[b]++
	lb.conns[in], lb.conns[out] = true, true
	lb.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) { _, _ = io.Copy(dst, src); done <- struct{}{} }
	go pipe(in, out)
	go pipe(out, in)
	<-done // either side ended: the connection is over for both
	in.Close()
	out.Close()
	<-done
	lb.mu.Lock()
	lb.open[b]--
	delete(lb.conns, in)
	delete(lb.conns, out)
	lb.mu.Unlock()
}

// openTo returns how many connections are open to backend b now.
func (lb *loadBalancer) openTo(b int) int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.open[b]
}

// refusedBy returns how many connections backend b refused.
func (lb *loadBalancer) refusedBy(b int) int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.refused[b]
}

func (lb *loadBalancer) close() {
	lb.ln.Close()
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for c := range lb.conns {
		c.Close()
	}
}
