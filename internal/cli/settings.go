package cli

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// setting is one resolved value and where it came from, for messages ("the token from
// OUTPOST_TOKEN was refused").
type setting struct {
	Value string `json:"value,omitempty"`
	From  string `json:"from,omitempty"`
}

// settings are the connection settings of this run: flags over the environment over the
// profile.
type settings struct {
	apiURL, org, token, caBundle, runner setting
	// profile is the profile read ("" when none), configPath the config file.
	profile, configPath string
}

// resolve works out the settings without checking that they are complete.
func (a *app) resolve() (*settings, error) {
	path, cfg, err := a.config()
	if err != nil {
		return nil, err
	}
	s := &settings{configPath: path}
	name, explicit := a.chosenProfile(cfg)
	p := &profile{}
	if name != "" {
		found, ok := cfg.Profiles[name]
		switch {
		case ok:
			p = found
			s.profile = name
		case explicit:
			return nil, cfg.missingProfile(name, path)
		}
	}
	from := fmt.Sprintf("profile %q of %s", s.profile, path)
	fromProfile := func(v string) setting {
		if v == "" {
			return setting{}
		}
		return setting{v, from}
	}
	pick := func(flagValue, flagName, envName, profileValue string) setting {
		switch {
		case flagValue != "":
			return setting{flagValue, "flag --" + flagName}
		case a.env.Getenv(envName) != "":
			return setting{a.env.Getenv(envName), envName}
		}
		return fromProfile(profileValue)
	}
	s.apiURL = pick(a.global.apiURL, "api-url", envAPIURL, p.APIURL)
	s.org = pick(a.global.org, "org", envOrg, p.Org)
	s.caBundle = fromProfile(p.CABundleFile)
	s.runner = fromProfile(p.Runner)
	switch {
	case a.env.Getenv(envToken) != "":
		s.token = setting{a.env.Getenv(envToken), envToken}
	case a.env.Getenv(envTokenFile) != "":
		a.warnIfShared(a.env.Getenv(envTokenFile), "the token file")
		s.token, err = tokenFromFile(a.env.Getenv(envTokenFile), envTokenFile+"="+a.env.Getenv(envTokenFile))
	case p.Token != "":
		a.warnIfShared(path, "the config file, which holds a token,")
		s.token = setting{p.Token, from + " (token)"}
	case p.TokenFile != "":
		a.warnIfShared(p.TokenFile, "the token file")
		s.token, err = tokenFromFile(p.TokenFile, fmt.Sprintf("token_file %s of %s", p.TokenFile, from))
	}
	return s, err
}

// warnIfShared warns once per run, on stderr, that file (what), whose token is about to be
// used, can be read by other users of the machine: the token is then theirs too. It is a
// warning, not a refusal, as for ssh's config and git's credential files: the file may sit on a
// share whose modes mean little.
func (a *app) warnIfShared(file, what string) {
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm()&0o077 == 0 || a.warned[file] {
		return
	}
	if a.warned == nil {
		a.warned = map[string]bool{}
	}
	a.warned[file] = true
	fmt.Fprintf(a.env.Stderr, "Warning: %s %s can be read by other users (mode %04o): they can use its token; run `chmod 600 %s`\n",
		what, file, fi.Mode().Perm(), file)
}

func tokenFromFile(path, from string) (setting, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return setting{}, fmt.Errorf("read the token (%s): %w", from, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return setting{}, fmt.Errorf("the token file (%s) is empty", from)
	}
	return setting{tok, from}, nil
}

// missing says what to do about the settings a command needs that are not set.
func (s *settings) missing() error {
	var lines []string
	if s.apiURL.Value == "" {
		lines = append(lines, fmt.Sprintf("no orchestrator URL: run `outpost config set api_url https://…`, set %s, or pass --api-url", envAPIURL))
	}
	if s.org.Value == "" {
		lines = append(lines, fmt.Sprintf("no organisation: run `outpost config set org NAME`, set %s, or pass --org", envOrg))
	}
	if s.token.Value == "" {
		lines = append(lines, fmt.Sprintf("no token: run `outpost config set token` (reads it from stdin) or `outpost config set token_file PATH`, or set %s", envToken))
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("not configured:\n  %s", strings.Join(lines, "\n  "))
}

// session is a connected admin client and the settings it was made from.
type session struct {
	*client.AdminClient
	s *settings
}

// connect resolves the settings and builds the admin client; opts add to the defaults.
func (a *app) connect(opts ...client.Option) (*session, error) {
	s, err := a.resolve()
	if err != nil {
		return nil, err
	}
	a.settings = s
	if err := s.missing(); err != nil {
		return nil, err
	}
	if err := idProblem("the organisation (from "+s.org.From+")", s.org.Value); err != nil {
		return nil, err
	}
	allowHTTP, err := a.insecureAllowHTTP()
	if err != nil {
		return nil, err
	}
	if err := client.CheckPlainHTTP(s.apiURL.Value, allowHTTP, "--insecure-allow-http (or "+envInsecureAllowHTTP+"=true)"); err != nil {
		return nil, fmt.Errorf("%w (the URL is from %s)", err, s.apiURL.From)
	}
	// The client's timeout bounds one try; a large inline source needs its time on a slow link.
	hc, _, err := client.NewHTTPClient(s.caBundle.Value, 10*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("ca_bundle_file (%s): %w", s.caBundle.From, err)
	}
	all := []client.Option{client.WithHTTPClient(hc), client.WithUserAgent("outpost-cli/" + version.Version)}
	if allowHTTP {
		all = append(all, client.AllowInsecureHTTP())
	}
	all = append(all, opts...)
	c, err := client.NewAdminClient(s.apiURL.Value, s.org.Value, s.token.Value, all...)
	if err != nil {
		return nil, fmt.Errorf("%w (the URL is from %s, the organisation from %s)", err, cmp.Or(s.apiURL.From, "nowhere"), cmp.Or(s.org.From, "nowhere"))
	}
	return &session{AdminClient: c, s: s}, nil
}

// insecureAllowHTTP is --insecure-allow-http, else OUTPOST_INSECURE_ALLOW_HTTP, as the provider
// and the agent take it.
func (a *app) insecureAllowHTTP() (bool, error) {
	if a.global.insecureAllowHTTP {
		return true, nil
	}
	raw := strings.TrimSpace(a.env.Getenv(envInsecureAllowHTTP))
	if raw == "" {
		return false, nil
	}
	allow, err := strconv.ParseBool(raw)
	if err != nil {
		return false, &usageError{fmt.Errorf("%s=%q is not true or false; unset it, or set it to true only if plain http to the orchestrator is acceptable", envInsecureAllowHTTP, raw)}
	}
	return allow, nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none yet"
	}
	return strings.Join(names, ", ")
}
