package pods

import (
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Only the real node: every pod of these tests really runs, so kwok is not needed.
func TestMain(m *testing.M) { testbed.Main(m, testbed.Options{Node: true}) }
