package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// redacted stands for a token in everything the command line prints.
const redacted = "(hidden)"

// configView is what `outpost config view -o json` prints: the file with tokens redacted, and
// the settings in effect with their sources.
type configView struct {
	Path           string              `json:"path"`
	CurrentProfile string              `json:"current_profile,omitempty"`
	Profiles       map[string]*profile `json:"profiles"`
	Effective      effectiveView       `json:"effective"`
}

type effectiveView struct {
	Profile string  `json:"profile,omitempty"`
	APIURL  setting `json:"api_url"`
	Org     setting `json:"org"`
	Token   setting `json:"token"`
	Runner  setting `json:"runner"`
}

func (a *app) configViewCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "view",
		Short: "Show the profiles and the settings in effect, with where each comes from (tokens hidden)",
		Example: `  outpost config view
  OUTPOST_TOKEN=… outpost config view     # shows that the token comes from the environment`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := a.checkFormat(); err != nil {
				return err
			}
			path, cfg, err := a.config()
			if err != nil {
				return err
			}
			v := configView{Path: path, CurrentProfile: cfg.CurrentProfile, Profiles: map[string]*profile{}}
			for name, p := range cfg.Profiles {
				c := *p
				if c.Token != "" {
					c.Token = redacted
				}
				v.Profiles[name] = &c
			}
			s, err := a.resolve()
			if err != nil {
				// Still show the file: that is how the problem gets found.
				fmt.Fprintln(a.env.Stderr, "Warning: "+err.Error())
				s = &settings{}
			}
			tok := s.token
			if tok.Value != "" {
				tok.Value = redacted
			}
			v.Effective = effectiveView{Profile: s.profile, APIURL: s.apiURL, Org: s.org, Token: tok, Runner: s.runner}
			return a.print(v, func(w io.Writer) { v.human(w, cfg) })
		},
	}
}

func (v *configView) human(w io.Writer, cfg *configFile) {
	fmt.Fprintf(w, "Config file: %s\n", v.Path)
	if len(cfg.Profiles) == 0 {
		fmt.Fprintln(w, "No profiles yet; start with `outpost config set api_url URL`.")
	} else {
		fmt.Fprintln(w)
		rows := [][]string{{"", "PROFILE", "API URL", "ORG", "TOKEN", "RUNNER"}}
		for _, name := range cfg.profileNames() {
			p := cfg.Profiles[name]
			cur := ""
			if name == cfg.CurrentProfile {
				cur = "*"
			}
			tok := "-"
			switch {
			case p.Token != "":
				tok = "stored " + redacted
			case p.TokenFile != "":
				tok = "file " + p.TokenFile
			}
			rows = append(rows, []string{cur, name, orDash(p.APIURL), orDash(p.Org), tok, orDash(p.Runner)})
		}
		table(w, rows)
	}
	fmt.Fprintln(w, "\nIn effect (flags, then environment, then profile):")
	e := v.Effective
	rows := [][]string{}
	for _, r := range []struct {
		key string
		v   setting
	}{{"api_url", e.APIURL}, {"org", e.Org}, {"token", e.Token}, {"runner", e.Runner}} {
		val, from := r.v.Value, ""
		if val == "" {
			val = "(not set)"
		} else {
			from = "from " + r.v.From
		}
		rows = append(rows, []string{"  " + r.key, val, from})
	}
	table(w, rows)
}
