package webui_test

import (
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"log"
	"net/http"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/webui"
)

// basicAuth lets through only requests that carry user and password; the
// comparison takes the same time whatever the guess.
func basicAuth(user, password string, next http.Handler) http.Handler {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if !ok || subtle.ConstantTimeCompare(gotUser[:], wantUser[:])&subtle.ConstantTimeCompare(gotPass[:], wantPass[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="ormlock", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The view has no authentication of its own: the service mounts it behind
// its own, here a basic-auth wrapper, on its admin mux under /ormlock/.
func ExampleHandler() {
	db, err := sql.Open("pgx", "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	nightly, err := ormlock.Cron("0 2 * * *", time.UTC)
	if err != nil {
		log.Fatal(err)
	}
	view, err := webui.Handler(db,
		webui.WithNamespace("billing"),
		webui.WithSchedule("nightly-settlement", nightly),
		webui.WithLeaders(ormlock.Name("billing-leader")),
		webui.WithLocks(ormlock.Name("backup")),
		webui.WithAllowedHosts("admin.billing.internal"),
	)
	if err != nil {
		log.Fatal(err)
	}
	admin := http.NewServeMux()
	admin.Handle("/ormlock/", basicAuth("ops", "a long secret from the service's vault", http.StripPrefix("/ormlock", view)))
	log.Fatal(http.ListenAndServe("127.0.0.1:9090", admin))
}
