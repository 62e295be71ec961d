package botsetup

import "github.com/toolgate/toolgate/tools"

// CheckToolReach refuses a workspace root or run_command dir of b that
// holds the bot's own files, which the model could read or rewrite
// through a tool: the embedded store's directory, dataDir (every
// conversation and decision), when there is no Redis (redisURL is empty),
// and the config file, configFile (the policy), when there is one.
// dataSetting and fileSetting name them in the error: DATA_DIR and
// CONFIG_FILE for the bot.
func CheckToolReach(b tools.BuiltinConfig, redisURL, dataSetting, dataDir, fileSetting, configFile string) error {
	if redisURL == "" {
		if err := b.CheckReach(dataSetting, dataDir); err != nil {
			return err
		}
	}
	if configFile != "" {
		return b.CheckReach(fileSetting, configFile)
	}
	return nil
}
