package webui_test

import (
	"database/sql"
	"errors"
	"log"
	"net/http"
	"os"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/webui"
)

// operator is the service's own authentication: here the user a
// basic-auth check established, allowed to act when it is in ops.
func operator(r *http.Request) (string, error) {
	u, _, ok := r.BasicAuth() // checked by the wrapper in front (basicAuth)
	if !ok {
		return "", errors.New("not signed in")
	}
	if u != "ops" {
		return "", errors.New(u + " may look, not act")
	}
	return u, nil
}

// The actions are on because the service names an author for each
// request; the CSRF key is shared by its replicas, so that a form shown by
// one can be posted to another behind the load balancer.
func ExampleWithActions() {
	db, err := sql.Open("pgx", "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	view, err := webui.Handler(db,
		webui.WithLeaders(ormlock.Name("billing-leader")),
		webui.WithAllowedHosts("admin.billing.internal"),
		webui.WithActions(operator, webui.WithCSRFKey([]byte(os.Getenv("ORMLOCK_CSRF_KEY")))),
	)
	if err != nil {
		log.Fatal(err) // a key shorter than 32 bytes is refused here
	}
	admin := http.NewServeMux()
	admin.Handle("/ormlock/", basicAuth("ops", "a long secret from the service's vault", http.StripPrefix("/ormlock", view)))
	log.Fatal(http.ListenAndServe("127.0.0.1:9090", admin))
}
