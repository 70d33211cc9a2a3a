package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/keeppeek/coordination/store/wire"
)

// ErrAnotherServer is what Start returns, and Conflict, when another server of the service answers on
// the same request subjects over the NATS servers the connection reaches: a second stated started
// against one external NATS cluster (by hand, by a deployment whose old instance still runs, on
// another host), with the same subject prefix. NATS would hand each request to one of the two at
// random, each with a store of its own, so a write acknowledged by one would be missing from the
// other's reads, watches and compare-and-set: the second one must not serve.
var ErrAnotherServer = errors.New("another " + ServiceName + " server serves the same subjects on this NATS")

// peerWindow is how long a look for other servers waits for their answers. When no service of the
// name answers at all, NATS says so at once (no responders), and a look ends then.
const peerWindow = 500 * time.Millisecond

// peerMetadata is what the server's service says of its process in its info ($SRV.INFO), so that an
// operator told of another server knows where it runs.
func peerMetadata() map[string]string {
	host, _ := os.Hostname()
	return map[string]string{"host": host, "pid": strconv.Itoa(os.Getpid())}
}

// otherServer asks every service named ServiceName that the connection reaches for its info, and
// returns the first one other than self (the id of this server's own service; "" before it has one)
// whose endpoints include this server's put subject: it serves the same requests. It returns nil when
// none does within peerWindow, or when ctx ends.
func (s *Server) otherServer(ctx context.Context, self string) (*micro.Info, error) {
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.PublishMsg(&nats.Msg{Subject: "$SRV.INFO." + ServiceName, Reply: inbox}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, peerWindow)
	defer cancel()
	want := s.opts.Prefix + ".state.v1.*." + string(wire.OpPut)
	for {
		m, err := sub.NextMsgWithContext(ctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil, nil // no service of the name at all
		case err != nil && ctx.Err() != nil:
			return nil, nil // the window ended: nobody else
		case err != nil:
			return nil, err
		}
		var info micro.Info
		if json.Unmarshal(m.Data, &info) != nil || info.ID == self {
			continue
		}
		for _, ep := range info.Endpoints {
			if ep.Subject == want {
				return &info, nil
			}
		}
	}
}

// anotherServerError describes other for ErrAnotherServer.
func anotherServerError(other *micro.Info) error {
	return fmt.Errorf("%w: instance %s, version %s, on host %q (pid %s)", ErrAnotherServer, other.ID, other.Version,
		other.Metadata["host"], other.Metadata["pid"])
}

// Conflict is nil while no other server answers on this server's subjects; otherwise it says which one
// (errors.Is(err, ErrAnotherServer)). The server looks every PeerCheckInterval: two servers started at
// the same instant, or on the two sides of a NATS cluster split that then heals, both passed Start's
// look. Requests are then split between the two stores until an operator stops one; each logs an error
// and reports the conflict here (stated's /readyz says it) until the other is gone.
func (s *Server) Conflict() error {
	if p := s.conflict.Load(); p != nil {
		return *p
	}
	return nil
}

// watchPeers looks for another server every PeerCheckInterval until the server stops.
func (s *Server) watchPeers() {
	defer close(s.peersDone)
	t := time.NewTicker(s.opts.PeerCheckInterval)
	defer t.Stop()
	self := s.svc.Info().ID
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		other, err := s.otherServer(s.ctx, self)
		if err != nil {
			continue // the connection is down or closing: look again at the next tick
		}
		if s.ctx.Err() != nil {
			return // the look was cut short by Stop, not ended by the window: it says nothing
		}
		switch had := s.Conflict(); {
		case other != nil:
			err := anotherServerError(other)
			if had == nil || had.Error() != err.Error() {
				s.opts.Logger.Error("another server serves this server's subjects on this NATS: requests are split between two stores, "+
					"so writes acknowledged by one are missing from the other; stop one of them", "err", err)
			}
			s.conflict.Store(&err)
		case had != nil:
			s.opts.Logger.Info("the other server serving this server's subjects is gone", "was", had)
			s.conflict.Store(nil)
		}
	}
}
