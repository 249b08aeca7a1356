package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jobfence/jobfence/internal/devenv"
)

func runSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := devenv.Install(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "PostgreSQL and redis-server are installed")
	return nil
}
