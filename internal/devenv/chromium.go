package devenv

import (
	"context"
	"os/exec"
)

// chromiumNames are the names Debian's chromium and chromium-headless-shell
// packages (and other distributions' builds) put on PATH, in order of
// preference: chromedp looks for the same names.
var chromiumNames = []string{"chromium", "chromium-browser", "chromium-headless-shell", "headless_shell", "google-chrome"}

// ChromiumBinary returns the path of a Chromium binary on PATH, for the
// browser tests.
func ChromiumBinary() (string, bool) {
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p, true
		}
	}
	return "", false
}

// InstallChromium makes sure a Chromium binary is present, installing
// Debian's chromium package when the process runs as root. Otherwise it
// returns an error wrapping ErrNotInstalled that says what to install.
func InstallChromium(ctx context.Context) error {
	if _, ok := ChromiumBinary(); ok {
		return nil
	}
	return aptInstall(ctx, []string{"chromium"})
}
