// Package connguard shares a server's connections fairly between its clients, so that clients
// that never prove who they are cannot hold the connections the others need.
//
// A connection limit alone (netutil.LimitListener) lets whoever opens connections first keep
// them: an idle keep-alive connection after a 401, or one that sends its headers a byte at a time,
// holds its place, and new connections wait in the listen backlog behind the holder's own. A
// guarded Listener instead takes every connection off the backlog at once and lets them in by
// fairness: the next one in is the oldest of the client address holding (or queueing) fewest,
// and when the server is full room is made by closing an idle connection. An idle connection
// that has not carried an authenticated request goes first: at once when its address holds more
// connections than the newcomer's, else once it is older than Grace (a client that connects sends its request at
// once; only one held idle on purpose is older). Then an idle one of the identity (a runner, a
// job) that holds most. A connection serving a request is never closed for another.
//
// On a server with Install, an answer over HTTP/1 on a connection that carried no authenticated
// request closes it ("Connection: close"), so a refused client keeps nothing open, and so does an
// answer to an identity holding more than its share. The server's handler says who a request is
// with Authenticated, once its credentials passed.
//
// A client is its address: job pods each have their own pod IP. Clients behind one address
// (a NAT, the process executor's jobs on one host) share its part, and among them a new
// connection waits behind that address's older ones (at most Grace per MaxUnauthenticated
// connections queued before it).
package connguard

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Limits bound a server's connections. Zero fields take the defaults given.
type Limits struct {
	// MaxConns is the most connections open at once. Default 64.
	MaxConns int
	// MaxUnauthenticated is the most connections open at once that have not carried an
	// authenticated request: new ones, and ones still sending their first request. Default
	// MaxConns/2.
	MaxUnauthenticated int
	// MaxPerIdentity is how many connections one identity keeps open between its requests; an
	// answer on a connection beyond it closes that connection. Default MaxConns/4, at least 1.
	MaxPerIdentity int
	// MaxWaiting is how many accepted connections wait for room at most (as the listen backlog
	// would); beyond it the newest of the address with most waiting is closed. Default
	// 4*MaxConns, at least 256.
	MaxWaiting int
	// Grace is how long a new connection has to send its first request before it can be closed
	// for a newcomer of an address that holds as many. Default 1 s.
	Grace time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = 64
	}
	if l.MaxUnauthenticated <= 0 || l.MaxUnauthenticated > l.MaxConns {
		l.MaxUnauthenticated = max(1, l.MaxConns/2)
	}
	if l.MaxPerIdentity <= 0 {
		l.MaxPerIdentity = max(1, l.MaxConns/4)
	}
	if l.MaxWaiting <= 0 {
		l.MaxWaiting = max(4*l.MaxConns, 256)
	}
	if l.Grace <= 0 {
		l.Grace = time.Second
	}
	return l
}

// Listener is a net.Listener that lets connections in within Limits; see the package
// documentation. Serve an http.Server on it after Install.
type Listener struct {
	net.Listener
	l Limits

	mu       sync.Mutex
	conns    map[*conn]struct{} // let in and not closed
	waiting  []*conn            // accepted off the backlog, not yet let in
	seq      uint64
	changed  chan struct{} // something to look at again: a newcomer, a close, a request done
	err      error         // the accept loop ended with it
	closedCh chan struct{}

	evicted, refused int64
}

// conn is one connection and what the guard knows of it.
type conn struct {
	net.Conn
	ln       *Listener
	client   string    // remote IP
	seq      uint64    // arrival order: lower is older
	admitted time.Time // when it was let in
	identity string    // "" until a request on it was authenticated
	busy     int       // requests being served on it (more than one over HTTP/2)
	closed   bool
	once     sync.Once
}

// Close closes the connection and frees its place.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.ln.mu.Lock()
		c.closed = true
		delete(c.ln.conns, c)
		c.ln.mu.Unlock()
		c.ln.poke()
	})
	return err
}

// Listen guards ln within l.
func Listen(ln net.Listener, l Limits) *Listener {
	g := &Listener{Listener: ln, l: l.withDefaults(), conns: map[*conn]struct{}{},
		changed: make(chan struct{}, 1), closedCh: make(chan struct{})}
	go g.acceptLoop()
	return g
}

// Limits returns the limits in force, defaults filled in.
func (g *Listener) Limits() Limits { return g.l }

func (g *Listener) poke() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// acceptLoop takes connections off the backlog as they come, so none waits there behind a
// client that keeps the server full.
func (g *Listener) acceptLoop() {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			g.mu.Lock()
			g.err = err
			g.mu.Unlock()
			close(g.closedCh)
			g.poke()
			return
		}
		rec := &conn{Conn: c, ln: g, client: addressOf(c)}
		var drop *conn
		g.mu.Lock()
		g.seq++
		rec.seq = g.seq
		g.waiting = append(g.waiting, rec)
		if len(g.waiting) > g.l.MaxWaiting {
			drop = g.crowdedWaiterLocked()
			g.refused++
		}
		g.mu.Unlock()
		if drop != nil {
			_ = drop.Conn.Close()
		}
		g.poke()
	}
}

func addressOf(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	if c.RemoteAddr() != nil {
		return c.RemoteAddr().String()
	}
	return ""
}

// crowdedWaiterLocked takes the newest waiting connection of the address with most waiting off
// the queue.
func (g *Listener) crowdedWaiterLocked() *conn {
	n := map[string]int{}
	for _, w := range g.waiting {
		n[w.client]++
	}
	best := -1
	for i, w := range g.waiting {
		if best < 0 || n[w.client] >= n[g.waiting[best].client] {
			best = i
		}
	}
	w := g.waiting[best]
	g.waiting = append(g.waiting[:best], g.waiting[best+1:]...)
	return w
}

// Accept returns the next connection let in: the oldest waiting one of the address that holds
// (or queues) fewest connections, once there is room for it.
func (g *Listener) Accept() (net.Conn, error) {
	for {
		now := time.Now()
		g.mu.Lock()
		if g.err != nil && len(g.waiting) == 0 {
			err := g.err
			g.mu.Unlock()
			return nil, err
		}
		if next := g.nextLocked(); next >= 0 {
			rec := g.waiting[next]
			open, unauth := g.countLocked()
			var victim *conn
			room := open < g.l.MaxConns && unauth < g.l.MaxUnauthenticated
			if !room {
				victim = g.unauthenticatedVictimLocked(now, rec.client)
				if victim == nil && unauth < g.l.MaxUnauthenticated {
					victim = g.identityVictimLocked(now)
				}
			}
			if room || victim != nil {
				g.waiting = append(g.waiting[:next], g.waiting[next+1:]...)
				rec.admitted = now
				g.conns[rec] = struct{}{}
				if victim != nil {
					victim.closed = true
					delete(g.conns, victim)
					g.evicted++
				}
				g.mu.Unlock()
				if victim != nil {
					_ = victim.Conn.Close()
				}
				return rec, nil
			}
		}
		g.mu.Unlock()
		select {
		case <-g.changed:
		case <-time.After(g.l.Grace / 10):
		}
	}
}

// Close stops the listener and closes the connections still waiting.
func (g *Listener) Close() error {
	err := g.Listener.Close()
	<-g.closedCh
	g.mu.Lock()
	w := g.waiting
	g.waiting = nil
	g.mu.Unlock()
	for _, c := range w {
		_ = c.Conn.Close()
	}
	return err
}

// nextLocked is the index of the waiting connection to let in next (-1: none waits).
func (g *Listener) nextLocked() int {
	if len(g.waiting) == 0 {
		return -1
	}
	held := g.heldLocked()
	best := 0
	for i, w := range g.waiting {
		if held[w.client] < held[g.waiting[best].client] {
			best = i
		}
	}
	return best
}

// heldLocked counts the connections of each address, let in or waiting.
func (g *Listener) heldLocked() map[string]int {
	held := map[string]int{}
	for c := range g.conns {
		held[c.client]++
	}
	for _, w := range g.waiting {
		held[w.client]++
	}
	return held
}

func (g *Listener) countLocked() (open, unauth int) {
	for c := range g.conns {
		open++
		if c.identity == "" {
			unauth++
		}
	}
	return open, unauth
}

// unauthenticatedVictimLocked is the idle unauthenticated connection to close for a newcomer
// from address client: the oldest of the address holding most of them, whatever its age, when
// that address holds (or queues) more connections than client does, newcomer included: it holds
// more than its share. Else the oldest older than Grace of the address that holds most of them
// (nil when there is none).
func (g *Listener) unauthenticatedVictimLocked(now time.Time, client string) *conn {
	held := g.heldLocked()
	other := g.victimLocked(now, 0, func(c *conn) (string, bool) { return c.client, c.identity == "" && c.client != client })
	if other != nil && held[other.conn.client] > held[client] {
		return other.conn
	}
	if v := g.victimLocked(now, g.l.Grace, func(c *conn) (string, bool) { return c.client, c.identity == "" }); v != nil {
		return v.conn
	}
	return nil
}

// identityVictimLocked is the idle authenticated connection to close: the oldest older than
// Grace of the identity that holds most connections.
func (g *Listener) identityVictimLocked(now time.Time) *conn {
	if v := g.victimLocked(now, g.l.Grace, func(c *conn) (string, bool) { return c.identity, c.identity != "" }); v != nil {
		return v.conn
	}
	return nil
}

// candidate is a connection that can be closed, and how many its group holds.
type candidate struct {
	conn *conn
	held int
}

// victimLocked groups the open connections that pass by the key it returns and picks the
// oldest idle one let in at least minAge ago of the group holding most (on a tie, the group
// with the oldest such one).
func (g *Listener) victimLocked(now time.Time, minAge time.Duration, group func(*conn) (string, bool)) *candidate {
	held := map[string]int{}
	oldest := map[string]*conn{}
	for c := range g.conns {
		k, ok := group(c)
		if !ok {
			continue
		}
		held[k]++
		if c.busy == 0 && now.Sub(c.admitted) >= minAge && (oldest[k] == nil || c.seq < oldest[k].seq) {
			oldest[k] = c
		}
	}
	var best *candidate
	for k, c := range oldest {
		if n := held[k]; best == nil || n > best.held || (n == best.held && c.seq < best.conn.seq) {
			best = &candidate{conn: c, held: n}
		}
	}
	return best
}

// Stats are counts for tests and metrics.
type Stats struct {
	// Open and Unauthenticated connections let in, and Waiting ones, now.
	Open, Unauthenticated, Waiting int
	// Evicted idle connections closed to make room, and Refused ones closed while waiting
	// because too many waited, since the listener was made.
	Evicted, Refused int64
}

// Stats returns the listener's counts.
func (g *Listener) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	open, unauth := g.countLocked()
	return Stats{Open: open, Unauthenticated: unauth, Waiting: len(g.waiting), Evicted: g.evicted, Refused: g.refused}
}
