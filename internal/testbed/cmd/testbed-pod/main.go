// Command testbed-pod is the one program inside the images the test bed builds for its real node,
// because no registry is reachable to pull any: the sandbox ("pause") image and a toolbox image
// for tests. It is built statically (CGO_ENABLED=0), so an image needs no other file.
//
// The first argument names a command; "pause" is the sandbox image's, and the init process of the
// node's PID namespace: it sleeps until SIGTERM or SIGINT and reaps every child, like Kubernetes'
// own pause.
//
//	pause                    as above
//	echo WORD...             print the words on stdout
//	fail CODE MESSAGE...     print the message on stderr, exit with CODE
//	sleep DURATION           sleep (a Go duration), then exit 0
//	serve ADDR TEXT          answer every HTTP request on ADDR with TEXT
//	get [-for D] URL         print the body of an HTTP GET; retry for D (default 30s) until 200;
//	                         https trusts the Pod's service account CA and sends its token
//	resolve [-for D] NAME    print the IPv4 addresses of NAME; retry for D (default 30s)
//	reach [-after D] [-timeout D] TARGET...
//	                         after D (default 0), try each TARGET once within the timeout
//	                         (default 3s) and print one line per TARGET: "reach TARGET: ok …"
//	                         or "reach TARGET: unreachable: …"; TARGET is http://HOST:PORT/…
//	                         (a GET, any status counts as reached) or HOST:PORT (a TCP
//	                         connection; https is left to the TLS layer). Always exits 0:
//	                         the caller reads the lines (NetworkPolicy tests)
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testbed-pod pause|echo|fail|sleep|serve|get|resolve|reach ARGS...")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	if err := run(cmd, args); err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintf(os.Stderr, "testbed-pod %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

// exitCode is an error that ends the program with that code and no further message.
type exitCode int

func (e exitCode) Error() string { return "exit code " + strconv.Itoa(int(e)) }

func run(cmd string, args []string) error {
	switch cmd {
	case "pause":
		pause()
		return nil
	case "echo":
		fmt.Println(strings.Join(args, " "))
		return nil
	case "fail":
		if len(args) == 0 {
			return errors.New("usage: fail CODE [MESSAGE...]")
		}
		code, err := strconv.Atoi(args[0])
		if err != nil || code < 0 || code > 255 {
			return fmt.Errorf("exit code %q: want 0-255", args[0])
		}
		fmt.Fprintln(os.Stderr, strings.Join(args[1:], " "))
		return exitCode(code)
	case "sleep":
		if len(args) != 1 {
			return errors.New("usage: sleep DURATION")
		}
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return err
		}
		time.Sleep(d)
		return nil
	case "serve":
		if len(args) != 2 {
			return errors.New("usage: serve ADDR TEXT")
		}
		return serve(args[0], args[1])
	case "reach":
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		after := fs.Duration("after", 0, "wait this long first")
		timeout := fs.Duration("timeout", 3*time.Second, "give each target this long")
		if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
			return errors.New("usage: reach [-after DURATION] [-timeout DURATION] TARGET [TARGET]")
		}
		time.Sleep(*after)
		for _, target := range fs.Args() {
			fmt.Printf("reach %s: %s\n", target, reach(target, *timeout))
		}
		return nil
	case "get", "resolve":
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		retryFor := fs.Duration("for", 30*time.Second, "keep retrying this long")
		if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
			return fmt.Errorf("usage: %s [-for DURATION] ARG", cmd)
		}
		if cmd == "get" {
			return retry(*retryFor, func(ctx context.Context) error { return get(ctx, fs.Arg(0)) })
		}
		return retry(*retryFor, func(ctx context.Context) error { return resolve(ctx, fs.Arg(0)) })
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// pause waits for SIGTERM or SIGINT. As PID 1 of a PID namespace (the pod sandbox, or the test
// bed node's init) it must also reap orphans, which are re-parented to it, or they would stay
// zombies for the life of the namespace.
func pause() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

func serve(addr, text string) error {
	srv := &http.Server{
		Addr:              addr,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, text)
		}),
	}
	return srv.ListenAndServe()
}

// retry runs f every 500 ms until it succeeds or d has passed, and returns its last error. Pods in
// tests start before the Service's endpoints or DNS records they use are programmed.
func retry(d time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		fmt.Fprintf(os.Stderr, "retrying: %v\n", err)
		time.Sleep(500 * time.Millisecond)
	}
}

// serviceAccountDir is where the kubelet mounts a Pod's service account token and cluster CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := http.DefaultClient
	if strings.HasPrefix(url, "https://") {
		// As an in-cluster client does: the API server's CA and the Pod's own token.
		if ca, err := os.ReadFile(serviceAccountDir + "/ca.crt"); err == nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca)
			client = &http.Client{Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			}}
		}
		if tok, err := os.ReadFile(serviceAccountDir + "/token"); err == nil {
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	_, err = os.Stdout.Write(body)
	return err
}

func resolve(ctx context.Context, name string) error {
	addrs, err := net.DefaultResolver.LookupIP(ctx, "ip4", name)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		fmt.Println(a.String())
	}
	return nil
}

// reach tries target once within timeout and says how it went, on one line.
func reach(target string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if strings.HasPrefix(target, "http://") {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return "unreachable: " + err.Error()
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "unreachable: " + err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Sprintf("ok: %s %q", resp.Status, body)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return "unreachable: " + err.Error()
	}
	_ = conn.Close()
	return "ok: connected"
}
