package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

// fanoutResult is one run of --mode fanout: a workflow's or the same
// number of independent jobs'.
type fanoutResult struct {
	// insert is how long the insert took; total, from the insert's start
	// to the last completion's commit (the fan-in's, in a workflow).
	insert, total time.Duration
	// firstDone is when the first completion (the root's, which releases
	// the fan-out) committed, from the insert's start.
	firstDone time.Duration
	load      string
	// cost is what the run cost the server (its statements with
	// --statements).
	cost cost
}

func (r fanoutResult) String() string {
	return fmt.Sprintf("%.0f ms (insert %.0f ms, first completion at %.0f ms), loadavg %s",
		ms(r.total), ms(r.insert), ms(r.firstDone), r.load) + r.cost.topStatements(5)
}

// runFanoutBench compares, in alternating pairs, a workflow of one task
// fanning out to cfg.fanout tasks that all fan in to one (cfg.fanout+2
// tasks) with cfg.fanout+2 independent jobs, each pair on fresh schemas
// of the same server and run by a worker of the same configuration, with
// a no-op handler. A run is timed from the start of its insert (one
// transaction either way) to the commit of its last completion: the
// fan-in's, in the workflow, which can complete only after every other
// task has. Issue 30 asks the workflow to take at most 1.5 times as long.
func runFanoutBench(ctx context.Context, dbURL string, cfg benchConfig, runs int, stdout io.Writer) error {
	var ratios, flows, indeps []float64
	for r := range runs {
		// A pair's runs take turns going first, as the other modes' pairs
		// do: the server gets faster over its first runs.
		order := []bool{r%2 == 1, r%2 == 0}
		var pair [2]fanoutResult
		for _, wf := range order {
			res, err := fanoutOnce(ctx, dbURL, cfg, wf)
			name := "independent"
			if wf {
				name = "workflow"
			}
			if err != nil {
				return fmt.Errorf("fanout run %d, %s: %w", r+1, name, err)
			}
			fmt.Fprintf(stdout, "fanout     run %d, %-11s %d tasks: %s\n", r+1, name, cfg.fanout+2, res)
			if wf {
				pair[1] = res
			} else {
				pair[0] = res
			}
		}
		ratio := pair[1].total.Seconds() / pair[0].total.Seconds()
		ratios = append(ratios, ratio)
		indeps, flows = append(indeps, ms(pair[0].total)), append(flows, ms(pair[1].total))
		fmt.Fprintf(stdout, "fanout     run %d: workflow / independent = %.2f\n", r+1, ratio)
	}
	strs := make([]string, len(ratios))
	for i, v := range ratios {
		strs[i] = fmt.Sprintf("%.2f", v)
	}
	fmt.Fprintf(stdout, "fanout     ratios %s (median %.2f; target at most 1.50); medians %.0f ms (workflow) against %.0f ms (independent)\n",
		strings.Join(strs, ", "), median(ratios), median(flows), median(indeps))
	return nil
}

// fanoutOnce runs one side of a pair on a fresh schema.
func fanoutOnce(ctx context.Context, baseURL string, cfg benchConfig, wf bool) (fanoutResult, error) {
	name := fmt.Sprintf("jobfence_bench_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return fanoutResult{}, err
	}
	defer admin.Close(context.Background())
	url, drop, err := runSchema(ctx, admin, baseURL, name, cfg.storageOptions())
	if err != nil {
		return fanoutResult{}, err
	}
	defer drop()
	if url, err = withExecMode(url, cfg.execMode); err != nil {
		return fanoutResult{}, err
	}
	quiet := slog.New(slog.DiscardHandler)
	producer, err := newBenchPool(ctx, url, 4)
	if err != nil {
		return fanoutResult{}, err
	}
	defer producer.Close()
	client := pgqueue.New(producer, pgqueue.Config{Logger: quiet})
	p, err := newBenchPool(ctx, url, int32(cfg.conns))
	if err != nil {
		return fanoutResult{}, err
	}
	defer p.Close()
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[benchArgs]) error { return nil })
	w, err := worker.New(pgqueue.New(p, pgqueue.Config{Logger: quiet}), reg, benchWorkerConfig("bench", cfg, quiet))
	if err != nil {
		return fanoutResult{}, err
	}
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return fanoutResult{}, err
	}
	// The worker is started, and idle, before the clock starts: both
	// sides are timed from their insert.
	if err := w.Start(ctx); err != nil {
		return fanoutResult{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		w.Stop(stopCtx)
	}()
	total := int64(cfg.fanout + 2)
	var res fanoutResult
	before, err := readCounters(ctx, admin, cfg.statements)
	if err != nil {
		return fanoutResult{}, err
	}
	start := time.Now()
	if wf {
		err = insertFanout(ctx, client, cfg.fanout)
	} else {
		ps := make([]queue.EnqueueParams, total)
		for i := range ps {
			ps[i] = queue.EnqueueParams{Kind: "bench", Args: []byte(`{"n":1}`)}
		}
		_, err = client.EnqueueMany(ctx, ps)
	}
	if err != nil {
		return fanoutResult{}, err
	}
	res.insert = time.Since(start)
	// Stats counts a completion once its commit returned; a workflow's
	// last is its fan-in's. The loop is bounded, as every wait here is.
	deadline := start.Add(10 * time.Minute)
	for {
		s := w.Stats()
		if s.Completed > 0 && res.firstDone == 0 {
			res.firstDone = time.Since(start)
		}
		if s.Completed >= total {
			res.total = time.Since(start)
			break
		}
		if s.FetchErrors+s.FinishErrors > 0 {
			return fanoutResult{}, fmt.Errorf("the worker failed %d fetches and %d finishes", s.FetchErrors, s.FinishErrors)
		}
		if time.Now().After(deadline) {
			return fanoutResult{}, fmt.Errorf("%d of %d tasks completed after 10 minutes", s.Completed, total)
		}
		time.Sleep(time.Millisecond)
	}
	res.load = loadAverage()
	after, err := readCounters(ctx, admin, cfg.statements)
	if err != nil {
		return fanoutResult{}, err
	}
	res.cost = costBetween(before, after, total)
	return res, nil
}

// insertFanout inserts a workflow of one task ("root") that n tasks
// depend on, and one ("sum") that depends on all n.
func insertFanout(ctx context.Context, c *pgqueue.Client, n int) error {
	wf := workflow.New("fanout").Add("root", benchArgs{N: 1}, nil)
	names := make([]string, n)
	root := &workflow.TaskOpts{DependsOn: []string{"root"}}
	for i := range names {
		names[i] = fmt.Sprintf("part-%d", i)
		wf.Add(names[i], benchArgs{N: 1}, root)
	}
	wf.Add("sum", benchArgs{N: 1}, &workflow.TaskOpts{DependsOn: names})
	_, err := workflow.Insert(ctx, c, wf)
	return err
}
