package slackapp

import (
	"strings"
	"testing"
)

// The Home tab is no channel: an entry names the channel of the call it
// lists, and its Always allow says that the rule applies there, never
// "here" nor "in this channel". A card listed without its channel still
// says that the rule applies to the conversation's channel.
func TestHomeSaysWhereAlwaysAllowApplies(t *testing.T) {
	c := pendingCard()
	c.FourEyes = false // four eyes offers no Always allow
	c.CopyOf = "C0PRIVATE1"
	unnamed := c
	unnamed.CopyOf = ""
	for name, tc := range map[string]struct {
		card Card
		want []string
	}{
		"named":   {card: c, want: []string{"requested by <@U024REQST> in <#C0PRIVATE1>"}},
		"unnamed": {card: unnamed},
	} {
		out := string(render(t, HomeView([]Card{tc.card}, nil)))
		for _, want := range append(tc.want, "Always allow there", "Always allow these arguments there",
			"Always allow this tool in the conversation's channel?", "Always allow these exact arguments in the conversation's channel?",
			"later calls of this tool in the conversation's channel will run", ActionRemember, ActionRememberExact) {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the Home entry does not say %q:\n%s", name, want, out)
			}
		}
		for _, unwanted := range []string{"Always allow here", "Always allow these arguments here", "in this channel", "arguments here?"} {
			if strings.Contains(out, unwanted) {
				t.Errorf("%s: the Home entry says %q, as if the Home tab were the call's channel:\n%s", name, unwanted, out)
			}
		}
	}
}
