package charttest
import ("testing";"fmt";"path/filepath"
"helm.sh/helm/v4/pkg/chart/common"
chartutil "helm.sh/helm/v4/pkg/chart/common/util"
"helm.sh/helm/v4/pkg/engine")
func TestX(t *testing.T){
 v,_:=ReadValuesFile(filepath.Join("testdata","full-values.yaml"))
 ch,_:=Load()
 caps:=common.DefaultCapabilities.Copy(); caps.APIVersions=append(caps.APIVersions,"monitoring.coreos.com/v1/ServiceMonitor")
 top,err:=chartutil.ToRenderValues(ch,v,common.ReleaseOptions{Name:"gpuplane",Namespace:"gpuplane-system",IsInstall:true},caps)
 if err!=nil{t.Fatal(err)}
 out,_:=engine.Render(ch,top)
 fmt.Println(out["gpuplane/templates/server.yaml"]); fmt.Println(out["gpuplane/templates/ingress.yaml"]); fmt.Println(out["gpuplane/templates/NOTES.txt"])
 fmt.Println(ValidateValues(map[string]any{"oidc":map[string]any{"issuerURL":"","existingSecret":""}}))
}
