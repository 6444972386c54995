package jobrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// providerSettings returns the CLI's environment for where providers come from: the shared
// plugin cache (TF_PLUGIN_CACHE_DIR, created if missing) and a CLI configuration file holding
// the cluster owner's provider_installation block (TF_CLI_CONFIG_FILE), written into the
// attempt's work directory. Both CLIs read the same variables and block.
func providerSettings(workDir, cacheDir, installation string) ([]string, error) {
	var env []string
	if cacheDir != "" {
		if !filepath.IsAbs(cacheDir) {
			return nil, fmt.Errorf("the plugin cache directory %q must be an absolute path", cacheDir)
		}
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("create the plugin cache directory: %w (is the plugin cache volume writable by the job pod's user?)", err)
		}
		env = append(env, "TF_PLUGIN_CACHE_DIR="+cacheDir)
	}
	if strings.TrimSpace(installation) != "" {
		file := filepath.Join(workDir, "outpost.tfrc")
		if err := os.WriteFile(file, []byte(installation+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("write the CLI configuration: %w", err)
		}
		env = append(env, "TF_CLI_CONFIG_FILE="+file)
	}
	return env, nil
}
