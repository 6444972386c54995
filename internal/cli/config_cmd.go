package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func (a *app) configCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage connection profiles (orchestrator URL, organisation, token)",
		Long: `Profiles name an orchestrator, an organisation and a token. They live in the config file
(--config, else $OUTPOST_CONFIG, else ~/.config/outpost/config.yaml), which is written with mode
0600. The token is stored in the file (set token reads it from stdin, so it stays out of your
shell history) or read from a file named by token_file on every command; it is never printed.

The flags --api-url and --org, then OUTPOST_API_URL, OUTPOST_ORG_ID and OUTPOST_TOKEN (or
OUTPOST_TOKEN_FILE), override the profile. --profile or OUTPOST_PROFILE picks a profile other
than the current one.

Keys: ` + keyList(),
		GroupID: "setup",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.configSetCommand(), a.configUnsetCommand(), a.configUseCommand(), a.configViewCommand(), a.configDeleteCommand())
	return cmd
}

func keyList() string {
	var b strings.Builder
	for _, k := range profileKeys {
		fmt.Fprintf(&b, "\n  %-15s %s", k.key, k.help)
	}
	return b.String()
}

func keyCompletion(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	var keys []string
	for _, k := range profileKeys {
		keys = append(keys, k.key+"\t"+k.help)
	}
	return keys, cobra.ShellCompDirectiveNoFileComp
}

// editProfile loads the config, hands the profile to edit (creating it), and saves.
func (a *app) editProfile(edit func(cfg *configFile, name string, p *profile) error) error {
	path, cfg, err := a.config()
	if err != nil {
		return err
	}
	name, _ := a.chosenProfile(cfg)
	if name == "" {
		name = "default"
	}
	if cfg.Profiles == nil {
		cfg.Profiles = map[string]*profile{}
	}
	p := cfg.Profiles[name]
	if p == nil {
		p = &profile{}
		cfg.Profiles[name] = p
	}
	if err := edit(cfg, name, p); err != nil {
		return err
	}
	made := ""
	if cfg.CurrentProfile == "" {
		cfg.CurrentProfile = name
		made = "; it is the current profile"
	}
	if err := cfg.save(path); err != nil {
		return err
	}
	fmt.Fprintf(a.env.Stderr, "Saved profile %q in %s%s.\n", name, path, made)
	return nil
}

func (a *app) configSetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set KEY [VALUE]",
		Short: "Set a key of the current profile (or of --profile NAME, created if new)",
		Long: `Set a key of the current profile, or of the profile named by --profile (created if new; the
first profile becomes the current one). Without a VALUE, or with "-", the value is read from
stdin: on a terminal the token is asked for without echo. Keys:` + keyList(),
		Example: `  outpost config set api_url https://outpost.example.com
  outpost config set org acme
  outpost config set token                         # paste it; it is not echoed
  kubectl get secret admin-token -o jsonpath='{.data.token}' | base64 -d | outpost config set token
  outpost config set token_file ~/.config/outpost/acme.token
  outpost config set --profile local api_url http://127.0.0.1:8700`,
		Args:              rangeArgs(1, 2, "KEY and optionally VALUE"),
		ValidArgsFunction: keyCompletion,
		RunE: func(_ *cobra.Command, args []string) error {
			key := args[0]
			if _, err := (&profile{}).field(key); err != nil {
				return err
			}
			value := "-"
			if len(args) == 2 {
				value = args[1]
			}
			if value == "-" {
				v, err := a.readSecret(key)
				if err != nil {
					return err
				}
				value = v
			}
			if err := checkValue(key, value); err != nil {
				return err
			}
			return a.editProfile(func(_ *configFile, _ string, p *profile) error {
				f, _ := p.field(key)
				*f = value
				return nil
			})
		},
	}
}

// readSecret reads a value from stdin; on a terminal it prompts and does not echo.
func (a *app) readSecret(key string) (string, error) {
	if f, ok := a.env.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(a.env.Stderr, "%s: ", key)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.env.Stderr)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	line, err := bufio.NewReader(a.env.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// checkValue refuses values that cannot work, before they are saved.
func checkValue(key, value string) error {
	if value == "" {
		return &usageError{fmt.Errorf("empty value for %s; to remove it use `outpost config unset %s`", key, key)}
	}
	switch key {
	case "api_url":
		u, err := url.Parse(value)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &usageError{fmt.Errorf("api_url %q must be an absolute http(s) URL, like https://outpost.example.com", value)}
		}
	case "org", "runner":
		if err := api.ValidateID(key, value); err != nil {
			return &usageError{err}
		}
	case "token_file", "ca_bundle_file":
		if _, err := os.Stat(value); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	return nil
}

func (a *app) configUnsetCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "unset KEY",
		Short:             "Remove a key from the current profile (or --profile NAME)",
		Example:           "  outpost config unset token",
		Args:              oneArg("a KEY"),
		ValidArgsFunction: keyCompletion,
		RunE: func(_ *cobra.Command, args []string) error {
			if _, err := (&profile{}).field(args[0]); err != nil {
				return err
			}
			return a.editProfile(func(_ *configFile, _ string, p *profile) error {
				f, _ := p.field(args[0])
				*f = ""
				return nil
			})
		},
	}
}

func (a *app) configUseCommand() *cobra.Command {
	return a.profileCommand("use PROFILE", "Make a profile the current one", "  outpost config use prod",
		func(cfg *configFile, name string) string {
			cfg.CurrentProfile = name
			return "Current profile: " + name + "."
		})
}

func (a *app) configDeleteCommand() *cobra.Command {
	return a.profileCommand("delete PROFILE", "Delete a profile (and the token stored in it)", "  outpost config delete staging",
		func(cfg *configFile, name string) string {
			delete(cfg.Profiles, name)
			if cfg.CurrentProfile == name {
				cfg.CurrentProfile = ""
			}
			return "Deleted profile " + name + "."
		})
}

// profileCommand makes a command that changes the config file about the profile its argument
// names, which must exist; change says what it did.
func (a *app) profileCommand(use, short, example string, change func(cfg *configFile, name string) string) *cobra.Command {
	return &cobra.Command{
		Use:               use,
		Short:             short,
		Example:           example,
		Args:              oneArg("a PROFILE"),
		ValidArgsFunction: a.completeProfiles,
		RunE: func(_ *cobra.Command, args []string) error {
			path, cfg, err := a.config()
			if err != nil {
				return err
			}
			if cfg.Profiles[args[0]] == nil {
				return cfg.missingProfile(args[0], path)
			}
			said := change(cfg, args[0])
			if err := cfg.save(path); err != nil {
				return err
			}
			fmt.Fprintln(a.env.Stderr, said)
			return nil
		},
	}
}
