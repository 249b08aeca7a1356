// Command service is jobfence embedded in a web service through one
// jobfence.Client: a signup handler creates the user and enqueues the
// welcome email in one transaction, the client's worker sends the emails,
// its scheduler enqueues a nightly report once per fire for the whole
// fleet, and SIGTERM drains the HTTP server and then the client (scheduler
// and worker) without losing a job.
//
//	go run ./examples/service          # serves, signs up three users, then stops itself with SIGTERM
//	go run ./examples/service -serve   # serves until you press Ctrl-C
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
)

// WelcomeEmail is the job's typed arguments.
type WelcomeEmail struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
}

// Kind names the job's handler.
func (WelcomeEmail) Kind() string { return "welcome_email" }

// NightlyReport is the arguments of a periodic job.
type NightlyReport struct{}

// Kind names the job's handler.
func (NightlyReport) Kind() string { return "nightly_report" }

func main() {
	serve := flag.Bool("serve", false, "serve until interrupted instead of running the self-check")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *serve); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, serve bool) error {
	env, err := devserver.Start(ctx, devserver.Options{Postgres: true}) // or your DATABASE_URL
	if err != nil {
		return err
	}
	defer env.Close()
	if err := migrations.Up(ctx, env.DatabaseURL); err != nil {
		return err
	}
	// A pool sized for the queues: a connection for each transactional
	// handler that may run at once, and the worker's own.
	queues := map[string]int{"default": 10}
	poolCfg, err := jobfence.PoolConfig(env.DatabaseURL, queues)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS users (id bigserial PRIMARY KEY, email text UNIQUE NOT NULL);
		CREATE TABLE IF NOT EXISTS sent_emails (user_id bigint PRIMARY KEY, fence bigint NOT NULL)`); err != nil {
		return err
	}
	// The handlers: a transactional one, so recording the email and
	// completing the job commit together, under the job's fence.
	reg := jobfence.NewRegistry()
	jobfence.AddHandlerTx(reg, func(ctx context.Context, tx pgx.Tx, job *jobfence.Job[WelcomeEmail]) error {
		// A real service calls its mail provider here, passing
		// job.IdempotencyKey() so a retried attempt cannot send twice.
		_, err := tx.Exec(ctx, `INSERT INTO sent_emails (user_id, fence) VALUES ($1, $2)`, job.Args.UserID, job.Fence)
		return err
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[NightlyReport]) error {
		var users int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&users); err != nil {
			return err
		}
		slog.InfoContext(ctx, "nightly report", "users", users, "fire", job.ScheduledAt)
		return nil
	})

	// One client: inserts, the worker on its queues, the schedules, and
	// (with Telemetry: telemetry.Options{}) metrics and traces for all three.
	client, err := jobfence.NewClient(pool, jobfence.Config{
		Queues:   queues,
		Handlers: reg,
		Schedules: []jobfence.Schedule{
			// Every instance configures it; each fire is one job for the fleet.
			{Name: "nightly-report", Spec: "0 3 * * *", Args: NightlyReport{}},
		},
		Logger: slog.Default(),
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}

	// The HTTP side: the user and their job exist together or not at all.
	mux := http.NewServeMux()
	mux.HandleFunc("POST /signup", func(rw http.ResponseWriter, r *http.Request) {
		email := r.FormValue("email")
		err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			var id int64
			if err := tx.QueryRow(r.Context(), `INSERT INTO users (email) VALUES ($1) RETURNING id`, email).Scan(&id); err != nil {
				return err
			}
			_, err := client.InsertTx(r.Context(), tx, WelcomeEmail{UserID: id, Email: email}, nil)
			return err
		})
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.WriteHeader(http.StatusCreated)
		json.NewEncoder(rw).Encode(map[string]string{"email": email})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	fmt.Println("listening on http://" + ln.Addr().String())

	if !serve {
		go selfCheck(ctx, "http://"+ln.Addr().String(), pool)
	}
	<-ctx.Done() // SIGTERM or Ctrl-C

	// Graceful shutdown: stop taking requests, then stop the client: its
	// scheduler enqueues no more fires, and running jobs finish (those
	// still running after 25s are put back for another instance).
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := client.Stop(shutdownCtx); err != nil {
		return err
	}
	var users, sent int
	pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM sent_emails)`).Scan(&users, &sent)
	fmt.Printf("stopped cleanly: %d users, %d welcome emails\n", users, sent)
	if users != sent {
		return errors.New("an email is missing")
	}
	return nil
}

// selfCheck signs up three users, waits for their emails, then sends this
// process SIGTERM, as an orchestrator would.
func selfCheck(ctx context.Context, base string, pool *pgxpool.Pool) {
	for _, e := range []string{"ada@example.com", "grace@example.com", "edsger@example.com"} {
		resp, err := http.Post(base+"/signup", "application/x-www-form-urlencoded", strings.NewReader("email="+e))
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println("POST /signup", e, "->", resp.Status)
	}
	for ctx.Err() == nil {
		var sent int
		pool.QueryRow(ctx, `SELECT count(*) FROM sent_emails`).Scan(&sent)
		if sent == 3 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("all welcome emails sent; sending SIGTERM to myself")
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
}
