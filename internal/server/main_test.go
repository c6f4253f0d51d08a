package server_test

import (
	"testing"

	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }
