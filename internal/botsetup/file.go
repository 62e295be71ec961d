package botsetup

import (
	"fmt"
	"os"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/tools"
)

// File is the config file, parsed by the packages that own each section.
type File struct {
	// Policy is the policy section; with no file, the default policy
	// (every call asks).
	Policy *approvals.Policy
	// Tools are the mcp_servers and builtin_tools sections; with no file,
	// no tools.
	Tools tools.Config
	// Data is the file's text as read; nil with no file.
	Data []byte
}

// LoadFile reads and parses the config file at path; an empty path gives
// the empty configuration (no tools, the default policy). setting names
// where the path came from (CONFIG_FILE for the bot, -config for the
// playground). Every error is a *ConfigError: "SETTING: PATH is a
// directory, not a file (...)" for a directory (what Docker mounts for a
// missing file), "SETTING: ..." when the file cannot be read, and "config
// file PATH: ..." when a section does not parse.
func LoadFile(setting, path string) (File, error) {
	var data []byte
	if path != "" {
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return File{}, &ConfigError{Err: fmt.Errorf("%s: %s is a directory, not a file (Docker creates one when the file to mount is missing: create config.yaml, for example from config.example.yaml)", setting, path)}
		}
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return File{}, &ConfigError{Err: fmt.Errorf("%s: %w", setting, err)}
		}
	}
	policy, err := approvals.ParseConfig(data)
	if err != nil {
		return File{}, &ConfigError{Err: fmt.Errorf("config file %s: %w", path, err)}
	}
	tc, err := tools.ParseConfig(data)
	if err != nil {
		return File{}, &ConfigError{Err: fmt.Errorf("config file %s: %w", path, err)}
	}
	return File{Policy: policy, Tools: tc, Data: data}, nil
}
