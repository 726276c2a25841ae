module github.com/subagentd/subagentd/clients/go

go 1.19
