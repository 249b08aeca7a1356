// Command bulk-email sends a campaign's emails through a provider's bulk
// API, many per call (jobfence.AddBatchHandler), as a batch whose
// callback (workflow.NewBatch) reports, once every email has ended, which
// were sent and which failed. It runs against a throwaway PostgreSQL:
//
//	go run ./examples/bulk-email
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/workflow"
)

// Email is one email of a campaign.
type Email struct {
	To string `json:"to"`
}

// Kind implements jobfence.Args.
func (Email) Kind() string { return "email" }

// CampaignSent is the campaign's callback: it runs once every email ended.
type CampaignSent struct {
	Campaign string `json:"campaign"`
}

// Kind implements jobfence.Args.
func (CampaignSent) Kind() string { return "campaign_sent" }

// sendBulk stands for a provider's bulk API: one call, one result per
// message; it refuses addresses at example.invalid.
func sendBulk(_ context.Context, to []string) (ids []string, errs []error) {
	fmt.Printf("provider: one call for %d emails\n", len(to))
	for i, addr := range to {
		if strings.HasSuffix(addr, "@example.invalid") {
			ids, errs = append(ids, ""), append(errs, jobfence.JobCancel(errors.New("no such mailbox")))
			continue
		}
		ids, errs = append(ids, fmt.Sprintf("msg-%d", i)), append(errs, nil)
	}
	return ids, errs
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	env, err := devserver.Start(ctx, devserver.Options{Postgres: true}) // or your DATABASE_URL
	if err != nil {
		return err
	}
	defer env.Close()
	if err := migrations.Up(ctx, env.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	done := make(chan struct{})
	reg := jobfence.NewRegistry()
	jobfence.AddBatchHandler(reg, func(ctx context.Context, batch []*jobfence.Job[Email]) []error {
		to := make([]string, len(batch))
		for i, j := range batch {
			to[i] = j.Args.To
		}
		ids, errs := sendBulk(ctx, to)
		for i, j := range batch {
			if errs[i] == nil {
				errs[i] = jobfence.RecordBatchOutput(ctx, j.Job, ids[i])
			}
		}
		return errs
	}, jobfence.BatchOpts{MaxSize: 50, Linger: 200 * time.Millisecond})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[CampaignSent]) error {
		members, err := workflow.BatchMembers(ctx)
		if err != nil {
			return err
		}
		for _, m := range members {
			var id string
			if err := m.Decode(&id); err != nil {
				fmt.Printf("%s: email %d %s: %s\n", job.Args.Campaign, m.Index, m.State, m.Error)
				continue
			}
			fmt.Printf("%s: email %d sent as %s\n", job.Args.Campaign, m.Index, id)
		}
		close(done)
		return nil
	})
	client, err := jobfence.NewClient(pool, jobfence.Config{Queues: map[string]int{"default": 50}, Handlers: reg})
	if err != nil {
		return err
	}
	b := workflow.NewBatch("spring").OnComplete(CampaignSent{Campaign: "spring"}, nil)
	for _, to := range []string{"ann@example.com", "bob@example.com", "nobody@example.invalid", "cy@example.com"} {
		b.Add(Email{To: to}, nil)
	}
	if _, err := client.InsertBatch(ctx, b); err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.Background())
	select {
	case <-done:
		return nil
	case <-time.After(time.Minute):
		return errors.New("the campaign's callback did not run within a minute")
	}
}
