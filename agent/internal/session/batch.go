package session

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// EventBatcher is the part of an Orchestrator that sends several events in one request
// (client.AgentClient.Events, api.ProtocolEventBatch). A client without it sends events one by
// one.
type EventBatcher interface {
	Events(ctx context.Context, events []api.DeploymentEvent) ([]api.EventResult, error)
}

const (
	// batchesInFlight is how many event batches may be on their way at once. While they are,
	// the events the workers send meanwhile gather into the next: the fewer in flight, the larger
	// the batches, and one batch is one transaction on the orchestrator.
	batchesInFlight = 4
	// maxBatchBytes closes a batch early when its messages and details add up, far below the
	// orchestrator's limit for a batch (api.MaxEventBatch events of the longest message).
	maxBatchBytes = 256 << 10
	// gatherFor is how long a batch waits for more events after its first, as a database waits
	// to group commits: the workers whose events were answered together send their next events
	// together, microseconds apart, and without the wait each would go alone. Short next to a
	// request, and events are not on the way of a pickup.
	gatherFor = 5 * time.Millisecond
)

// eventBatcher gathers the events that the event workers send at the same moment into batches,
// the way a database groups commits: a worker hands its event over and waits for that event's
// own result, so the workers' order within an attempt (timeline, started, finished) holds, and a
// refusal or a retry is the one attempt's business as before.
type eventBatcher struct {
	to EventBatcher
	// single sends one event alone: a batch of one, and each event of a batch the orchestrator
	// has no route for.
	single  func(ctx context.Context, deploymentID string, req api.EventRequest) (*api.EventResponse, error)
	timeout time.Duration
	queue   chan *batchedEvent
	slots   chan struct{}
}

type batchedEvent struct {
	ev   api.DeploymentEvent
	done chan batchResult // buffered: a sender that gave up is not waited for
}

type batchResult struct {
	resp *api.EventResponse
	err  error
}

func newEventBatcher(to EventBatcher, single func(context.Context, string, api.EventRequest) (*api.EventResponse, error), timeout time.Duration) *eventBatcher {
	return &eventBatcher{to: to, single: single, timeout: timeout, queue: make(chan *batchedEvent), slots: make(chan struct{}, batchesInFlight)}
}

// send hands one event to the batcher and waits for its result.
func (b *eventBatcher) send(ctx context.Context, deploymentID string, req api.EventRequest) (*api.EventResponse, error) {
	it := &batchedEvent{ev: api.DeploymentEvent{DeploymentID: deploymentID, EventRequest: req}, done: make(chan batchResult, 1)}
	select {
	case b.queue <- it:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-it.done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run forms and sends batches until ctx ends, then waits for those on their way. Stop it only
// once no worker sends any more.
func (b *eventBatcher) run(ctx context.Context) {
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	for {
		// A slot first: while every slot is taken, events wait in the queue and gather.
		select {
		case b.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		var batch []*batchedEvent
		select {
		case it := <-b.queue:
			batch = append(batch, it)
		case <-ctx.Done():
			<-b.slots
			return
		}
		size := eventSize(batch[0].ev)
		wait := time.NewTimer(gatherFor)
	gather:
		for len(batch) < api.MaxEventBatch && size < maxBatchBytes {
			select {
			case it := <-b.queue:
				batch = append(batch, it)
				size += eventSize(it.ev)
			case <-wait.C:
				break gather
			}
		}
		wait.Stop()
		inFlight.Go(func() {
			defer func() { <-b.slots }()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
			defer cancel()
			b.flush(rctx, batch)
		})
	}
}

// eventSize is about what an event adds to a batch's body.
func eventSize(ev api.DeploymentEvent) int {
	return 512 + len(ev.Message) + len(ev.Detail) + len(ev.Reason) + len(ev.Node)
}

// flush sends one batch and hands every event its result.
func (b *eventBatcher) flush(ctx context.Context, batch []*batchedEvent) {
	if len(batch) == 1 {
		resp, err := b.single(ctx, batch[0].ev.DeploymentID, batch[0].ev.EventRequest)
		batch[0].done <- batchResult{resp, err}
		return
	}
	events := make([]api.DeploymentEvent, len(batch))
	for i, it := range batch {
		events[i] = it.ev
	}
	results, err := b.to.Events(ctx, events)
	switch {
	case errors.Is(err, api.ErrEventBatchUnsupported):
		var wg sync.WaitGroup
		for _, it := range batch {
			wg.Go(func() {
				resp, err := b.single(ctx, it.ev.DeploymentID, it.ev.EventRequest)
				it.done <- batchResult{resp, err}
			})
		}
		wg.Wait()
	case err != nil:
		for _, it := range batch {
			it.done <- batchResult{nil, err}
		}
	default:
		for i, it := range batch {
			if err := results[i].Err(); err != nil {
				it.done <- batchResult{nil, err}
				continue
			}
			it.done <- batchResult{results[i].Response, nil}
		}
	}
}

// postEvent sends one event of an attempt: through the batcher once a poll answer chose
// api.ProtocolEventBatch and the client can batch, alone otherwise.
func (s *Session) postEvent(ctx context.Context, deploymentID string, req api.EventRequest) (*api.EventResponse, error) {
	s.mu.Lock()
	b, protocol := s.batcher, s.protocol
	s.mu.Unlock()
	if b != nil && protocol >= api.ProtocolEventBatch {
		return b.send(ctx, deploymentID, req)
	}
	return s.o.Client.Event(ctx, deploymentID, req)
}
