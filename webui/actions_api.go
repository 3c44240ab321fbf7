package webui

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/ormlock/ormlock/internal/apiv1"
)

// actAPI serves POST /api/v1/actions: a JSON body
// {"kind","job","slot","key","reason"}, with Content-Type application/json
// and the ActionHeader, by an author the service's function names. It
// answers the action's entry of the actions log (apiv1.Action, the field
// names of GET /api/v1/actions), or {"error": "..."} (apiv1.Error) with
// the status saying why: 400 bad input or refused by Act (a running or done
// slot, nobody leads), 403 a refused author or another site, 404 an
// unknown job, 415 not JSON or without the ActionHeader, 503 the database.
func (h actor) actAPI(w http.ResponseWriter, req *http.Request) {
	if why := crossSite(req); why != "" {
		apiError(w, http.StatusForbidden, why+": nothing was changed")
		return
	}
	if ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); ct != "application/json" || req.Header.Get(ActionHeader) == "" {
		apiError(w, http.StatusUnsupportedMediaType, "an action is posted as Content-Type: application/json with the header "+ActionHeader+": 1: nothing was changed")
		return
	}
	author, why := h.s.actions.authorOf(req)
	if author == "" {
		apiError(w, http.StatusForbidden, why+": nothing was changed")
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
		apiError(w, http.StatusBadRequest, "the body is not one JSON object of kind, job, slot, key and reason: "+clean(err.Error(), 200))
		return
	}
	a, aerr := h.action(in)
	if aerr != nil {
		apiError(w, aerr.code, aerr.msg)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), h.s.timeout)
	defer cancel()
	rec, err := h.act(ctx, a, author)
	if err != nil {
		code, msg := h.statusOf(err)
		apiError(w, code, msg)
		return
	}
	apiJSON(w, http.StatusOK, apiv1.ActionOf(rec))
}
