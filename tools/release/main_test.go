package release

import (
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// The API server only: the chart is installed and compared, its pods never need to run.
func TestMain(m *testing.M) { testbed.Main(m, testbed.Options{}) }
