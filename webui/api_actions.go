package webui

import "net/http"

// apiPost is the seam of the API's actions: it answers a POST to
// /api/v1/actions and returns true when the embedding service turned
// actions on (WithActions), and returns false otherwise, leaving the
// request to the read-only API, which answers 405 as for any method but
// GET and HEAD. The actions' own code (WithActions, its CSRF check and
// author) replaces this body; until then the API takes no action.
func (h *handler) apiPost(w http.ResponseWriter, req *http.Request) bool { return false }
