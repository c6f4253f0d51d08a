import { Content, Header, Page } from '@backstage/core-components';
import { GpuplaneContent } from './GpuplaneContent';

/** The plugin page of the classic frontend system (header included). */
export function GpuplanePage() {
  return (
    <Page themeId="tool">
      <Header title="GPU clusters" subtitle="Virtual clusters and GPU quota from gpuplane" />
      <Content>
        <GpuplaneContent />
      </Content>
    </Page>
  );
}
