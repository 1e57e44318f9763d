module magpie/loadtest/peers/go

go 1.19
