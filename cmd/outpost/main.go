// Command outpost is the Outpost command line: it drives an Outpost orchestrator (runners, state
// storages, deployments). Everything it does is in package internal/cli; this file only wires it
// to the process: arguments, standard streams, environment and signals.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	os.Exit(cli.Run(context.Background(), os.Args[1:], cli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv, Interrupts: sigs,
	}))
}
