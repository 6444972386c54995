package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Environment variables the command line reads. The first four and the last are the Terraform
// provider's too.
const (
	envAPIURL    = "OUTPOST_API_URL"
	envOrg       = "OUTPOST_ORG_ID"
	envToken     = "OUTPOST_TOKEN"
	envTokenFile = "OUTPOST_TOKEN_FILE"
	envProfile   = "OUTPOST_PROFILE"
	envConfig    = "OUTPOST_CONFIG"
	// envInsecureAllowHTTP is the provider's and the agent's opt-in to plain http off loopback.
	envInsecureAllowHTTP = "OUTPOST_INSECURE_ALLOW_HTTP"
)

// configFile is the config file: named profiles and the current one.
//
//	current_profile: prod
//	profiles:
//	  prod:
//	    api_url: https://outpost.example.com
//	    org: acme
//	    token_file: /home/me/.config/outpost/prod.token
//	  local:
//	    api_url: http://127.0.0.1:8700
//	    org: demo
//	    token: 3f2a…            # the file is written 0600
//	    runner: quickstart      # the default --runner of deploy
type configFile struct {
	CurrentProfile string              `json:"current_profile,omitempty"`
	Profiles       map[string]*profile `json:"profiles,omitempty"`
}

// profile is one orchestrator, organisation and token.
type profile struct {
	APIURL string `json:"api_url,omitempty"`
	Org    string `json:"org,omitempty"`
	// Token is the admin token itself; TokenFile names a file holding it. Token wins.
	Token     string `json:"token,omitempty"`
	TokenFile string `json:"token_file,omitempty"`
	// CABundleFile holds extra PEM certificates trusted for the orchestrator (a private CA).
	CABundleFile string `json:"ca_bundle_file,omitempty"`
	// Runner is the runner deploy uses when --runner is not given.
	Runner string `json:"runner,omitempty"`
}

// profileKeys are the keys `outpost config set` takes, with what they mean.
var profileKeys = []struct{ key, help string }{
	{"api_url", "orchestrator URL, e.g. https://outpost.example.com"},
	{"org", "organisation (a DNS-1123 label)"},
	{"token", "admin token, stored in the config file (0600); `outpost config set token` reads it from stdin"},
	{"token_file", "file holding the admin token (read on every command)"},
	{"ca_bundle_file", "PEM file of extra CA certificates trusted for the orchestrator"},
	{"runner", "default runner of `outpost deploy`"},
}

// field returns a pointer to the profile's field named key.
func (p *profile) field(key string) (*string, error) {
	switch key {
	case "api_url":
		return &p.APIURL, nil
	case "org":
		return &p.Org, nil
	case "token":
		return &p.Token, nil
	case "token_file":
		return &p.TokenFile, nil
	case "ca_bundle_file":
		return &p.CABundleFile, nil
	case "runner":
		return &p.Runner, nil
	}
	keys := make([]string, len(profileKeys))
	for i, k := range profileKeys {
		keys[i] = k.key
	}
	return nil, &usageError{fmt.Errorf("unknown key %q; a profile has %s", key, strings.Join(keys, ", "))}
}

// configPath is the config file this run uses: --config, $OUTPOST_CONFIG, else
// $XDG_CONFIG_HOME/outpost/config.yaml or ~/.config/outpost/config.yaml.
func (a *app) configPath() (string, error) {
	if a.global.configFile != "" {
		return a.global.configFile, nil
	}
	if p := a.env.Getenv(envConfig); p != "" {
		return p, nil
	}
	if x := a.env.Getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "outpost", "config.yaml"), nil
	}
	home := a.env.Getenv("HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot tell where the config file is (no HOME); pass --config or set %s", envConfig)
		}
		home = h
	}
	return filepath.Join(home, ".config", "outpost", "config.yaml"), nil
}

// config reads this run's config file and says where it is.
func (a *app) config() (string, *configFile, error) {
	path, err := a.configPath()
	if err != nil {
		return "", nil, err
	}
	cfg, err := loadConfig(path)
	return path, cfg, err
}

// missingProfile says that a profile the user named is not in the file, and how to make it.
func (c *configFile) missingProfile(name, path string) error {
	return fmt.Errorf("profile %q is not in %s (profiles: %s); create it with `outpost config set --profile %s api_url URL`",
		name, path, listOrNone(c.profileNames()), name)
}

// loadConfig reads the config file; a missing file is an empty config.
func loadConfig(path string) (*configFile, error) {
	cfg := &configFile{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the config file: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, fmt.Errorf("config file %s: %w; fix it, or rewrite it with `outpost config set`", path, err)
	}
	return cfg, nil
}

// save writes the config file atomically with mode 0600 (it may hold tokens), in a directory
// made 0700 if it did not exist.
func (c *configFile) save(path string) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the config directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("write the config file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append([]byte("# outpost CLI configuration; edit with `outpost config set|use`.\n"), data...)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// profileNames lists the profiles, sorted.
func (c *configFile) profileNames() []string {
	return slices.Sorted(maps.Keys(c.Profiles))
}

// chosenProfile is the profile this run uses: --profile, $OUTPOST_PROFILE, else the current one.
// explicit says whether the user named it (then it must exist).
func (a *app) chosenProfile(c *configFile) (name string, explicit bool) {
	if a.global.profile != "" {
		return a.global.profile, true
	}
	if p := a.env.Getenv(envProfile); p != "" {
		return p, true
	}
	return c.CurrentProfile, false
}
