module example.invalid/baton/clients/go

go 1.22
