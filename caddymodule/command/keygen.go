package command

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
)

// defaultKeyDir holds the test key files, as `idempotency keygen` writes
// them (each platform's Sender names its own) and `idempotency send` and
// the examples' local Caddyfiles read them. The private keys stand in for
// the platform's own signing keys: send signs with them as the platform
// would, the gateway verifies with the public halves.
const defaultKeyDir = "idemgate-testkeys"

// sendPlatforms are the presets send and keygen know (those with a test
// signer), in the registry's order.
var sendPlatforms = func() []string {
	var names []string
	for _, p := range platforms.All() {
		if platforms.SenderOf(p.Name) != nil {
			names = append(names, p.Name)
		}
	}
	return names
}()

// presetTable lists what col says of each preset send and keygen know (of
// its test signer), a line (or more) each, for a command's help.
func presetTable(col func(*keying.Sender) string) string {
	var b strings.Builder
	for _, name := range sendPlatforms {
		for i, line := range strings.Split(col(platforms.SenderOf(name)), "\n") {
			if i > 0 {
				name = ""
			}
			fmt.Fprintf(&b, "  %-18s %s\n", name, line)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func keygenCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "keygen --platform <name|all> [--dir <dir>] [--force]",
		Short: "Writes test keys and secrets for trying a preset locally with send",
		Long: `
Writes throw-away keys for one preset (or all) into --dir (default
` + defaultKeyDir + `): the files a local Caddyfile names (public keys, a PayPal
certificate, secrets) and the private keys ` + "`idemgate idempotency send`" + ` signs with,
standing in for the platform's own. They are for local tests only: never
configure them on a route that takes real notifications.

` + presetTable(keyFiles) + `

Existing files are kept unless --force is given.
`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			platform, _ := cmd.Flags().GetString("platform")
			dir, _ := cmd.Flags().GetString("dir")
			force, _ := cmd.Flags().GetBool("force")
			names := []string{platform}
			if platform == "all" {
				names = sendPlatforms
			} else if !slices.Contains(sendPlatforms, platform) {
				return fmt.Errorf("--platform must be one of %s or all, not %q", strings.Join(sendPlatforms, ", "), platform)
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			for _, name := range names {
				files, err := platforms.SenderOf(name).Keygen()
				if err != nil {
					return fmt.Errorf("%s: %v", name, err)
				}
				for _, f := range files {
					p := filepath.Join(dir, f.Name)
					if err := writeKeyFile(p, f.Data, force); err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), p)
				}
			}
			return nil
		},
	}
	c.Flags().String("platform", "", "The preset: "+strings.Join(sendPlatforms, ", ")+", or all")
	c.Flags().String("dir", defaultKeyDir, "Where to write the files")
	c.Flags().Bool("force", false, "Overwrite existing files")
	c.MarkFlagRequired("platform")
	return c
}

// keyFiles lists the files keygen writes for s's platform, wrapped for a
// help page.
func keyFiles(s *keying.Sender) string {
	var b strings.Builder
	line := 0
	for i, f := range s.Files {
		switch {
		case i == 0:
		case line+2+len(f) > 58:
			b.WriteString(",\n")
			line = 0
		default:
			b.WriteString(", ")
			line += 2
		}
		b.WriteString(f)
		line += len(f)
	}
	return b.String()
}

// writeKeyFile writes a key file readable by its owner only.
func writeKeyFile(path string, data []byte, force bool) error {
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !force {
		flag |= os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: keep it, or write new keys with --force (and restart the gateway that reads them)", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
