// Command outpost-demo runs the end-to-end demo behind `make demo` and `make demo-down`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/outpost-dev/terraform-provider-outpost/tools/demo"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: outpost-demo up|down [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var c demo.Config
	wd, _ := os.Getwd()
	fs.StringVar(&c.Repo, "repo", wd, "repository root")
	fs.StringVar(&c.Dir, "dir", os.Getenv("OUTPOST_DEMO_DIR"), "where the demo keeps its files (default <repo>/.demo)")
	fs.StringVar(&c.CLI, "cli", "terraform", "terraform or tofu")
	fs.StringVar(&c.Executor, "executor", demo.ExecutorKubernetes, "kubernetes (the agent's pods run deployments in job pods on the test bed's real node) or process (local processes)")
	fs.StringVar(&c.TofuPath, "tofu", "", "path of the OpenTofu binary (for --cli=tofu)")
	fs.StringVar(&c.OrchestratorAddr, "orchestrator-addr", os.Getenv("OUTPOST_DEMO_ORCHESTRATOR_ADDR"), "orchestrator listen address")
	fs.StringVar(&c.StateAddr, "state-addr", os.Getenv("OUTPOST_DEMO_STATE_ADDR"), "agent state backend listen address")
	fs.StringVar(&c.HealthAddr, "health-addr", os.Getenv("OUTPOST_DEMO_HEALTH_ADDR"), "agent health listen address")
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if os.Args[1] == "up" {
		err = demo.Up(ctx, c)
	} else {
		err = demo.Down(ctx, c)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nmake demo: %v\n", err)
		os.Exit(1)
	}
}
