package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// What to do about an interrupted follow.
type choice int

const (
	choiceDetach choice = iota
	choiceCancel
	choiceResume
)

// follow streams dep's log until it ends and returns its result as the exit code. The log goes
// to stdout (to stderr with -o json or yaml, where stdout gets the final deployment). Ctrl-C
// asks whether to cancel the deployment, detach from it or keep following; without a terminal
// it detaches and says how to cancel.
func (a *app) follow(ctx context.Context, s *session, dep *api.Deployment) error {
	d := a.deployer(s)
	log := a.env.Stdout
	if a.machine() {
		log = a.env.Stderr
	}
	lw := &lineEnd{w: log}
	sigs, release := a.intr.take()
	defer release()
	var offset int64
	canceled := false
	for {
		fctx, stop := context.WithCancel(ctx)
		interrupted := make(chan struct{})
		go func() {
			select {
			case <-sigs:
				close(interrupted)
				stop()
			case <-fctx.Done():
			}
		}()
		next, final, err := d.Follow(fctx, dep.ID, offset, lw)
		stop()
		offset = next
		if final != nil {
			lw.finish()
			code := d.Result(final)
			if a.machine() {
				if err := a.print(final, nil); err != nil {
					return err
				}
			}
			if code == ExitOK {
				return nil
			}
			return &exitError{code: code}
		}
		select {
		case <-interrupted:
		default:
			if errors.Is(err, api.ErrNotFound) {
				return fmt.Errorf("deployment %s does not exist in org %s; list deployments with `outpost deployment list`", dep.ID, s.Org())
			}
			return err
		}
		lw.finish()
		c := choiceDetach
		if !canceled && a.interactive() {
			c = a.ask(ctx, dep, sigs)
		}
		switch c {
		case choiceResume:
			continue
		case choiceCancel:
			canceled = true
			after, err := s.CancelDeployment(ctx, dep.ID)
			switch {
			case errors.Is(err, api.ErrConflict):
				fmt.Fprintln(a.env.Stderr, "It had already ended.")
			case err != nil:
				return fmt.Errorf("cancel deployment %s: %w", dep.ID, err)
			case after.Status == api.StatusCanceled:
				fmt.Fprintln(a.env.Stderr, "Canceled (it had not started).")
			default:
				fmt.Fprintln(a.env.Stderr, "Cancel requested: the agent stops the run and releases the state lock. Following until it ends (Ctrl-C again detaches).")
			}
			continue
		}
		fmt.Fprintf(a.env.Stderr, "Detached from deployment %s; it keeps running.\n  follow it again: outpost deployment logs %s --follow\n  cancel it:       outpost deployment cancel %s\n",
			dep.ID, dep.ID, dep.ID)
		return &exitError{code: ExitInterrupted}
	}
}

// ask puts the choice to the person at the terminal. Another Ctrl-C, or the end of input,
// detaches.
func (a *app) ask(ctx context.Context, dep *api.Deployment, sigs <-chan os.Signal) choice {
	fmt.Fprintf(a.env.Stderr, `
Deployment %s (%s on runner %s) is still running.
  [c] cancel it: the agent stops the run and releases the state lock
  [d] detach: it keeps running; follow it again with: outpost deployment logs %s --follow
  [f] keep following
Choice [c/d/f, default d]: `, dep.ID, dep.Operation, dep.RunnerID, dep.ID)
	answer := make(chan string, 1)
	go func() {
		line, err := a.stdinLines().ReadString('\n')
		if err != nil && line == "" {
			line = "d"
		}
		answer <- line
	}()
	select {
	case line := <-answer:
		return parseChoice(line)
	case <-sigs:
		fmt.Fprintln(a.env.Stderr)
		return choiceDetach
	case <-ctx.Done():
		return choiceDetach
	}
}

func parseChoice(line string) choice {
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "c", "cancel":
		return choiceCancel
	case "f", "follow", "r", "resume":
		return choiceResume
	}
	return choiceDetach
}

// stdinLines is one buffered reader of stdin for the whole run, so nothing typed ahead is lost
// between two questions.
func (a *app) stdinLines() *bufio.Reader {
	if a.stdin == nil {
		a.stdin = bufio.NewReader(a.env.Stdin)
	}
	return a.stdin
}

// interactive reports whether a person can answer questions: stdin and stderr are terminals.
func (a *app) interactive() bool { return isTerminal(a.env.Stdin) && isTerminal(a.env.Stderr) }

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// lineEnd remembers whether the last byte written ended a line, so that what is printed after
// an interrupted or finished log starts on a line of its own.
type lineEnd struct {
	w       io.Writer
	partial bool
}

func (l *lineEnd) Write(p []byte) (int, error) {
	if len(p) > 0 {
		l.partial = p[len(p)-1] != '\n'
	}
	return l.w.Write(p)
}

func (l *lineEnd) finish() {
	if l.partial {
		fmt.Fprintln(l.w)
		l.partial = false
	}
}
