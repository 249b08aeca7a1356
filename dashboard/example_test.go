package dashboard_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/jobfencetest"
)

// Mount the dashboard in a service under /admin/jobs, behind the service's
// own authentication: requireAdmin stands for it. Actor names the
// service's user in the action log and as who paused a queue.
func ExampleNew() {
	ctx := context.Background()
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL")) // in a service: its own pool
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	requireAdmin := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Admin") == "" { // a session check in a real service
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	ui := dashboard.New(db.Pool, dashboard.Options{
		BasePath: "/admin/jobs",
		Actor:    func(r *http.Request) string { return r.Header.Get("X-Admin") },
	})
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", requireAdmin(ui))

	for _, admin := range []string{"", "ada"} {
		req := httptest.NewRequest(http.MethodGet, "/admin/jobs/queues", nil)
		req.Header.Set("X-Admin", admin)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(rec.Code, strings.Contains(rec.Body.String(), `href="/admin/jobs/jobs"`))
	}
	// Output:
	// 403 false
	// 200 true
}
