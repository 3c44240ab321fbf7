package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"
)

// ActionResult is the JSON that POST /api/v1/actions answers when the
// action was carried out: its entry of the actions log. The field names
// are versioned with the path (v1) and never change within it.
type ActionResult struct {
	ID        int64     `json:"id"`
	Namespace string    `json:"namespace"`
	Kind      string    `json:"kind"`
	Job       string    `json:"job,omitempty"`
	Slot      time.Time `json:"slot,omitzero"`
	Key       string    `json:"key,omitempty"`
	Author    string    `json:"author"`
	Reason    string    `json:"reason"`
	Outcome   string    `json:"outcome"`
	At        time.Time `json:"at"`
}

// actionProblem is the JSON of a refused action: {"error": "..."}, with
// the status code saying why (400 bad input, 403 refused author or
// cross-site, 404 unknown job, 415 not JSON or without the ActionHeader,
// 503 database).
type actionProblem struct {
	Error string `json:"error"`
}

// actAPI serves POST /api/v1/actions: a JSON body
// {"kind","job","slot","key","reason"}, with Content-Type application/json
// and the ActionHeader, by an author the service's function names.
func (h *handler) actAPI(w http.ResponseWriter, req *http.Request) {
	if why := crossSite(req); why != "" {
		writeJSON(w, http.StatusForbidden, actionProblem{why + ": nothing was changed"})
		return
	}
	if ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); ct != "application/json" || req.Header.Get(ActionHeader) == "" {
		writeJSON(w, http.StatusUnsupportedMediaType, actionProblem{"an action is posted as Content-Type: application/json with the header " + ActionHeader + ": 1: nothing was changed"})
		return
	}
	author, why := h.s.actions.authorOf(req)
	if author == "" {
		writeJSON(w, http.StatusForbidden, actionProblem{why + ": nothing was changed"})
		return
	}
	var in actionInput
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxActionBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&in)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, actionProblem{"the body is not one JSON object of kind, job, slot, key and reason: " + clean(err.Error(), 200)})
		return
	}
	a, aerr := h.action(in)
	if aerr != nil {
		writeJSON(w, aerr.code, actionProblem{aerr.msg})
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), h.s.timeout)
	defer cancel()
	rec, err := h.act(ctx, a, author)
	if err != nil {
		code, msg := h.statusOf(err)
		writeJSON(w, code, actionProblem{msg})
		return
	}
	writeJSON(w, http.StatusOK, ActionResult{
		ID: rec.ID, Namespace: rec.Namespace, Kind: string(rec.Kind), Job: rec.Job, Slot: rec.Slot.UTC(),
		Key: rec.Key, Author: rec.Author, Reason: rec.Reason, Outcome: rec.Outcome, At: rec.At.UTC(),
	})
}

// writeJSON answers v as JSON (html/template's escaping is not at hand:
// encoding/json escapes <, > and & itself, and the response is never
// rendered as HTML: nosniff).
func writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		plain(w, http.StatusInternalServerError, "ormlock webui: cannot encode the answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}
