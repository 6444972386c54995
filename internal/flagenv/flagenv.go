// Package flagenv parses command-line flags (spf13/pflag, the flag package cobra uses) with an
// environment variable behind every flag: a flag given on the command line wins, then its
// variable, then whatever the flag held before parsing (its default, or a value the caller read
// from a file). The agent and the orchestrator both parse their flags with it, so the two
// programs read their settings the same way.
package flagenv

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Name is the environment variable of a flag: prefix, then the flag's name in upper case with
// underscores, so --kube-qps with prefix OUTPOST_ reads OUTPOST_KUBE_QPS.
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then sets every flag the command line did not give from its
// environment variable (Name) when that is not empty. Flags named in noEnv read no variable.
// Every other flag's usage names its variable, so --help shows them. An unparsable variable is
// an error naming the variable; all of them are reported at once.
func Parse(fs *pflag.FlagSet, args []string, prefix string, getenv func(string) string, noEnv ...string) error {
	fs.VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(noEnv, f.Name) {
			f.Usage += " (env " + Name(prefix, f.Name) + ")"
		}
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		name := Name(prefix, f.Name)
		v := getenv(name)
		if f.Changed || v == "" || slices.Contains(noEnv, f.Name) {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
		}
	})
	return errors.Join(errs...)
}
