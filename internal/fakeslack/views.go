package fakeslack

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// View is a modal or Home tab view as the fake stores it.
type View struct {
	ID              string
	Type            string // "modal" or "home"
	User            string
	CallbackID      string
	PrivateMetadata string
	ExternalID      string
	Hash            string
	RootViewID      string
	PreviousViewID  string
	// Closed is set once the view left the user's screen: submitted without
	// a response action, cleared, or replaced by a newer Home tab.
	Closed bool
	// JSON is the whole view object as Slack would send it to the app.
	JSON json.RawMessage
}

type viewState struct {
	View
	obj jsonObject
}

type trigger struct {
	user   string
	issued time.Time
	used   bool
}

// issueTriggerLocked returns a fresh trigger_id for user.
func (s *Server) issueTriggerLocked(user string) string {
	s.seq++
	id := fmt.Sprintf("%d.%d.%s", 1000000000+s.seq, 700000000+s.seq, randomHex(16))
	s.triggers[id] = &trigger{user: user, issued: s.cfg.now()}
	return id
}

// useTriggerLocked exchanges a trigger_id, which Slack allows once and
// within three seconds of the interaction.
func (s *Server) useTriggerLocked(id string) (*trigger, *apiError) {
	t := s.triggers[id]
	switch {
	case t == nil:
		return nil, fail("invalid_trigger_id")
	case t.used:
		return nil, fail("exchanged_trigger_id")
	case s.cfg.now().Sub(t.issued) > s.cfg.triggerTTL:
		return nil, fail("expired_trigger_id")
	}
	t.used = true
	return t, nil
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// viewParam decodes and validates the "view" parameter.
func viewParam(rq *request, wantType string) (jsonObject, *apiError) {
	return checkView(rq.raw("view"), wantType)
}

// checkView decodes and validates a view's JSON, as sent: a view larger
// than Slack takes is view_too_large, one that breaks Block Kit's rules
// invalid_arguments.
func checkView(raw json.RawMessage, wantType string) (jsonObject, *apiError) {
	var v jsonObject
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return nil, fail("invalid_arguments", "missing required field: view")
	}
	if len(raw) > maxViewBytes {
		return nil, fail("view_too_large", fmt.Sprintf("the view is %d bytes, more than %d", len(raw), maxViewBytes))
	}
	if msgs := validateView(v, wantType); len(msgs) > 0 {
		return nil, fail("invalid_arguments", msgs...)
	}
	return v, nil
}

// putViewLocked stores a view object under id, filling in the fields Slack
// adds, and returns it.
func (s *Server) putViewLocked(vs *viewState, obj jsonObject) *viewState {
	if vs.ID == "" {
		vs.ID = "V" + s.idLocked()
		s.viewOrder = append(s.viewOrder, vs.ID)
		s.views[vs.ID] = vs
	}
	if vs.RootViewID == "" {
		vs.RootViewID = vs.ID
	}
	vs.Type, _ = obj["type"].(string)
	vs.CallbackID, _ = obj["callback_id"].(string)
	vs.PrivateMetadata, _ = obj["private_metadata"].(string)
	vs.ExternalID, _ = obj["external_id"].(string)
	vs.Hash = fmt.Sprintf("%d.%s", s.cfg.now().Unix(), randomHex(8))
	for k, v := range map[string]any{
		"id":                    vs.ID,
		"team_id":               s.cfg.teamID,
		"app_id":                s.cfg.appID,
		"app_installed_team_id": s.cfg.teamID,
		"bot_id":                s.cfg.botID,
		"hash":                  vs.Hash,
		"root_view_id":          vs.RootViewID,
		"previous_view_id":      nilIfEmpty(vs.PreviousViewID),
		"callback_id":           vs.CallbackID,
		"private_metadata":      vs.PrivateMetadata,
		"external_id":           vs.ExternalID,
		"state":                 jsonObject{"values": jsonObject{}},
	} {
		obj[k] = v
	}
	for _, k := range []string{"clear_on_close", "notify_on_close"} {
		if _, ok := obj[k]; !ok {
			obj[k] = false
		}
	}
	if _, ok := obj["blocks"]; !ok {
		obj["blocks"] = []any{}
	}
	vs.obj = obj
	vs.JSON, _ = json.Marshal(obj)
	s.notifyLocked()
	return vs
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// openStackLocked returns the user's open modals, root first.
func (s *Server) openStackLocked(user string) []*viewState {
	var stack []*viewState
	for _, id := range s.viewOrder {
		if vs := s.views[id]; vs.User == user && vs.Type == "modal" && !vs.Closed {
			stack = append(stack, vs)
		}
	}
	return stack
}

func (s *Server) viewsOpen(rq *request) (response, *apiError) {
	t, aerr := s.useTriggerLocked(rq.str("trigger_id"))
	if aerr != nil {
		return nil, aerr
	}
	obj, aerr := viewParam(rq, "modal")
	if aerr != nil {
		return nil, aerr
	}
	// A new modal replaces whatever modal the user had open.
	for _, vs := range s.openStackLocked(t.user) {
		vs.Closed = true
	}
	vs := s.putViewLocked(&viewState{View: View{User: t.user}}, obj)
	return response{"view": json.RawMessage(vs.JSON)}, nil
}

func (s *Server) viewsPush(rq *request) (response, *apiError) {
	t, aerr := s.useTriggerLocked(rq.str("trigger_id"))
	if aerr != nil {
		return nil, aerr
	}
	obj, aerr := viewParam(rq, "modal")
	if aerr != nil {
		return nil, aerr
	}
	stack := s.openStackLocked(t.user)
	if len(stack) == 0 {
		return nil, fail("not_found")
	}
	if len(stack) >= 3 {
		return nil, fail("push_limit_reached")
	}
	top := stack[len(stack)-1]
	vs := s.putViewLocked(&viewState{View: View{User: t.user, RootViewID: top.RootViewID, PreviousViewID: top.ID}}, obj)
	return response{"view": json.RawMessage(vs.JSON)}, nil
}

func (s *Server) viewsUpdate(rq *request) (response, *apiError) {
	var vs *viewState
	if id := rq.str("view_id"); id != "" {
		vs = s.views[id]
	} else if ext := rq.str("external_id"); ext != "" {
		for _, id := range s.viewOrder {
			if s.views[id].ExternalID == ext {
				vs = s.views[id]
			}
		}
	} else {
		return nil, fail("invalid_arguments", "must provide view_id or external_id")
	}
	if vs == nil {
		return nil, fail("not_found")
	}
	if h := rq.str("hash"); h != "" && h != vs.Hash {
		return nil, fail("hash_conflict")
	}
	obj, aerr := viewParam(rq, vs.Type)
	if aerr != nil {
		return nil, aerr
	}
	s.putViewLocked(vs, obj)
	return response{"view": json.RawMessage(vs.JSON)}, nil
}

func (s *Server) viewsPublish(rq *request) (response, *apiError) {
	user := rq.str("user_id")
	if _, ok := s.users[user]; !ok {
		return nil, fail("user_not_found")
	}
	obj, aerr := viewParam(rq, "home")
	if aerr != nil {
		return nil, aerr
	}
	home := s.homeLocked(user)
	if h := rq.str("hash"); h != "" && home != nil && h != home.Hash {
		return nil, fail("hash_conflict")
	}
	if home == nil {
		home = &viewState{View: View{User: user}}
	}
	s.putViewLocked(home, obj)
	return response{"view": json.RawMessage(home.JSON)}, nil
}

func (s *Server) homeLocked(user string) *viewState {
	for _, id := range s.viewOrder {
		if vs := s.views[id]; vs.User == user && vs.Type == "home" {
			return vs
		}
	}
	return nil
}

func (vs *viewState) snapshot() View {
	v := vs.View
	v.JSON = slices.Clone(vs.JSON)
	return v
}

// Views returns every view opened, pushed or published, oldest first.
func (s *Server) Views() []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]View, 0, len(s.viewOrder))
	for _, id := range s.viewOrder {
		out = append(out, s.views[id].snapshot())
	}
	return out
}

// View returns a view by id.
func (s *Server) View(id string) (View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if vs, ok := s.views[id]; ok {
		return vs.snapshot(), true
	}
	return View{}, false
}

// OpenModals returns the modals on the user's screen, root first.
func (s *Server) OpenModals(user string) []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []View
	for _, vs := range s.openStackLocked(user) {
		out = append(out, vs.snapshot())
	}
	return out
}

// HomeView returns the Home tab last published for user.
func (s *Server) HomeView(user string) (View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if vs := s.homeLocked(user); vs != nil {
		return vs.snapshot(), true
	}
	return View{}, false
}

// WaitView waits until a view for which pred reports true exists and
// returns it.
func (s *Server) WaitView(pred func(View) bool, timeout time.Duration) (View, error) {
	var found View
	err := s.waitFor(timeout, func() bool {
		for _, id := range s.viewOrder {
			if v := s.views[id].snapshot(); pred(v) {
				found = v
				return true
			}
		}
		return false
	})
	return found, err
}
