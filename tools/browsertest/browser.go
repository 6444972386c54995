// Package browsertest drives the web console in a real Chromium (Debian's package, installed by
// scripts/chromium.sh) with chromedp, for the tests that look at the console as a person does:
// its own test against a played agent (orchestratortest.Agent), the demo's and the real-pod
// tests against real job pods. Every step has a time limit and a failed one leaves a screenshot
// of the page beside the others. A package of the tools module, so chromedp stays out of the
// product's.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// stepTimeout bounds one step (a navigation, a click, a read); waitTimeout bounds a wait for the
// page to change by itself (a live update).
const (
	stepTimeout = 20 * time.Second
	waitTimeout = 15 * time.Second
)

// Chromium finds Debian's Chromium; without it the test is skipped, except under CI=true.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium: install it with scripts/chromium.sh (Debian package chromium)")
	}
	t.Skip("needs Chromium: scripts/chromium.sh installs Debian's package")
	return ""
}

// Screenshots is the directory screenshots go to: $OUTPOST_CONSOLE_SCREENSHOTS, or else
// outpost-console-screenshots in the temporary directory. The test logs which.
func Screenshots(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("OUTPOST_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "outpost-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// Session is one browser (its own profile, so its own cookies) on one console.
type Session struct {
	t    testing.TB
	ctx  context.Context
	base string
	dir  string
	// prefix starts the name of every screenshot, so tests sharing a directory keep theirs apart.
	prefix string
}

// New starts Chromium (exe) on the console at base, saving screenshots into dir with names that
// start with prefix. The browser is closed when the test ends.
func New(t testing.TB, exe, base, dir, prefix string) *Session {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], //nolint:gocritic // a copy: the array is not changed
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return &Session{t: t, ctx: ctx, base: base, dir: dir, prefix: prefix}
}

// Base is the console's URL.
func (s *Session) Base() string { return s.base }

// Do runs steps with a time limit, failing the test with what was being done (and a screenshot
// of the page then).
func (s *Session) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		s.failed(what, err)
	}
}

// Open navigates to path under the console and waits until sel is visible.
func (s *Session) Open(path, sel string) {
	s.t.Helper()
	s.Do("open "+path, chromedp.Navigate(s.base+path), chromedp.WaitVisible(CSS(sel)))
}

func (s *Session) failed(what string, err error) {
	s.t.Helper()
	if shot, serr := chromedp.Run(s.ctx, chromedp.FullScreenshot(100)); serr == nil {
		_ = os.WriteFile(filepath.Join(s.dir, s.prefix+"failed-"+strings.Join(strings.Fields(what), "-")+".png"), shot, 0o644)
	}
	s.t.Fatalf("%s: %v", what, err)
}

// Shot saves a screenshot of the page as <prefix><name>.png.
func (s *Session) Shot(name string) {
	s.t.Helper()
	png, err := chromedp.Run(s.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, s.prefix+name+".png"), png, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// Text is the text of the first element matching the CSS selector sel.
func (s *Session) Text(sel string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, stepTimeout)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.TextContent(CSS(sel)))
	if err != nil {
		s.failed("read "+sel, err)
	}
	return out
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise) and returns its value.
func Eval[T any](s *Session, expr string) T {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, stepTimeout)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		s.failed("evaluate "+expr, err)
	}
	return out
}

// WaitFor waits until the JavaScript expression is true, for up to 15 s. A poll that a
// navigation cut short (the page it ran in went away) starts again in the new page.
func (s *Session) WaitFor(what, expr string) {
	s.t.Helper()
	s.WaitForWithin(what, expr, waitTimeout)
}

// WaitForWithin is WaitFor with its own time limit, for what the cluster takes its time over
// (a pod scheduled, an image refused).
func (s *Session) WaitForWithin(what, expr string, limit time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.failed("wait for "+what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CSS selects by CSS selector.
func CSS(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// SignIn signs in on the sign-in page with a token (and an organisation, for the admin token),
// and waits for the runners page it lands on.
func (s *Session) SignIn(token, org string) {
	s.t.Helper()
	s.Open("/signin", `input[name=token]`)
	s.Do("type the token", chromedp.SendKeys(CSS(`input[name=token]`), token))
	if org != "" {
		s.Do("type the organisation", chromedp.SendKeys(CSS(`input[name=org]`), org))
	}
	s.Shot("signin")
	s.Do("sign in", chromedp.Click(CSS(`form.signin button`)), chromedp.WaitVisible(CSS(`table.runners`)))
}

// JSString quotes s as a JavaScript string literal.
func JSString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
